"""Orbax checkpoints: the train state (params, optimizer state, step) plus the
run's config as JSON, keeping the last K and the best by a metric.

Orbax writes each step into a temporary directory and renames it when complete,
so a run killed mid-save leaves no checkpoint that looks finished. Orbax does not
verify what it reads back, so every save also writes `sha256sums.json` into the
step's directory, and a restore checks every file against it first.

A checkpoint that fails that check, or cannot be read, is *damaged*: restore warns
naming the file, moves the step's directory to `<checkpoints>-damaged/<step>-<time>`
(never deleted, and the run can save that step again later) and falls back to the
checkpoint before. A checkpoint whose files are intact but that does not fit the
state being restored (another architecture, another version of this code) is not
damage: that is an error naming the directory, and nothing is moved.

Readers of another run (fine-tuning, export), which may still be training, read through
training/checkpoint_reader.py: a private snapshot of a complete step, never the live
folder.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging as std_logging
import os
import shutil
import time
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging
from orbax.checkpoint import checkpoint_managers as policies

from common.errors import CheckpointError  # noqa: F401  (raised here; models/ raise it too)
from common.files import write_json_atomic

CHECKSUMS = "sha256sums.json"


class _DropReadOnlyNotices(std_logging.Filter):
    """Orbax warns on every read-only open; eval_glue.py opens read-only by design."""

    def filter(self, record) -> bool:
        message = record.getMessage()
        return "read_only=True" not in message and "directory is read only" not in message


_READ_ONLY_FILTER = _DropReadOnlyNotices()


def file_digests(directory: str) -> dict[str, str]:
    """sha256 of every file below `directory` (relative paths), the manifest excluded."""
    digests = {}
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            if relative == CHECKSUMS:
                continue
            with open(path, "rb") as f:
                digests[relative] = hashlib.file_digest(f, "sha256").hexdigest()
    return digests


class Checkpointer:
    def __init__(
        self,
        directory: str,
        keep_last: int = 3,
        best_metric: str | None = None,
        best_mode: str = "min",
        read_only: bool = False,
        named: str | None = None,
    ):
        """named: the folder messages name (a reader's snapshot names the run's)."""
        self.directory = os.path.abspath(directory)
        self.named = named or self.directory
        self.read_only = read_only
        self.damaged: list[str] = []  # what the last restore found damaged, for its caller
        if read_only:
            logging.get_absl_logger().addFilter(_READ_ONLY_FILTER)
        keep = [policies.LatestN(n=max(keep_last, 1))]
        best = {}
        if best_metric:
            # BestN sorts by the metric and keeps the *last* n: for "min" the order is
            # reversed. Orbax writes a save's metrics only when best_fn is set.
            keep.append(
                policies.BestN(
                    get_metric_fn=lambda metrics: metrics[best_metric],
                    reverse=best_mode == "min",
                    n=1,
                    keep_checkpoints_without_metrics=False,
                )
            )
            best = {"best_fn": lambda metrics: metrics[best_metric], "best_mode": best_mode}
        options = ocp.CheckpointManagerOptions(
            **best,
            preservation_policy=policies.AnyPreservationPolicy(keep),
            enable_async_checkpointing=False,
            read_only=read_only,
            create=not read_only,
        )
        self.manager = ocp.CheckpointManager(
            self.directory, options=options,
            item_handlers={"state": ocp.StandardCheckpointHandler(),
                           "config": ocp.JsonCheckpointHandler()},
        )

    # -- queries -----------------------------------------------------------------
    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        steps = self.all_steps()
        return steps[-1] if steps else None

    def step_directory(self, step: int) -> str:
        return os.path.join(self.directory, str(step))

    def shown(self, step: int) -> str:
        """The step's directory as messages name it."""
        return os.path.join(self.named, str(step))

    def best_step(self, metric: str, mode: str = "min") -> int | None:
        """The step whose metrics (saved with it) are best by `metric`; None when no
        checkpoint carries it (preemption saves carry none)."""
        scored = {}
        for step in self.all_steps():
            saved = self.manager.metrics(step) or {}
            if metric in saved:
                scored[step] = float(saved[metric])
        if not scored:
            return None
        pick = min if mode == "min" else max
        return pick(scored, key=lambda step: (scored[step], -step))

    # -- save ---------------------------------------------------------------------
    def save(self, step: int, state: Any, config: dict[str, Any], metrics=None) -> None:
        self._check_free_space(step, state)
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                config=ocp.args.JsonSave(json.loads(json.dumps(config, default=str))),
            ),
            metrics=metrics,
            force=True,
        )
        self.manager.wait_until_finished()
        if jax.process_index() == 0 and step in self.manager.all_steps():
            directory = self.step_directory(step)
            write_json_atomic(os.path.join(directory, CHECKSUMS), file_digests(directory))

    def _check_free_space(self, step: int, state: Any) -> None:
        """Fails before writing when the checkpoint cannot fit: orbax's writer threads
        meeting a full disk leave a broken save and report it from every thread."""
        needed = sum(x.nbytes for x in jax.tree.leaves(state)) + 2**20
        free = shutil.disk_usage(self.directory).free
        if free < needed:
            raise OSError(errno.ENOSPC, f"no space left for checkpoint {step} "
                          f"({needed / 2**20:.1f} MiB needed, {free / 2**20:.1f} MiB free)",
                          self.directory)

    # -- verify and set aside -----------------------------------------------------
    def verify(self, step: int) -> bool:
        """True if every file matches the checksums written at save; False if the
        checkpoint predates them. Raises CheckpointError naming a damaged file."""
        directory = self.step_directory(step)
        expected = read_manifest(directory, shown=self.shown(step))
        if expected is None:
            logging.warning("checkpoint %s has no %s (saved by an older version, or killed "
                            "just after saving); restoring it unverified", self.shown(step),
                            CHECKSUMS)
            return False
        actual = file_digests(directory)
        for name in sorted(set(expected) | set(actual)):
            where = os.path.join(self.shown(step), name)
            if name not in actual:
                raise CheckpointError(f"{where} is missing")
            if expected.get(name) != actual[name]:
                raise CheckpointError(f"{where} does not match its checksum in {CHECKSUMS}")
        return True

    def set_aside(self, step: int) -> str | None:
        """Moves a damaged step out of the way (read-only: leaves it); returns where to."""
        if self.read_only:
            return None
        target = os.path.join(f"{self.directory}-damaged",
                              f"{step}-{time.strftime('%Y%m%d-%H%M%S')}")
        if jax.process_index() == 0:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.move(self.step_directory(step), target)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(f"checkpoint {step} set aside")
        self.manager.reload()
        return target

    # -- restore ------------------------------------------------------------------
    def restore(self, abstract_state: Any | None = None, step: int | None = None,
                check_config=None) -> tuple[Any, dict, int]:
        """(state, config, step) from `step` or the newest checkpoint that restores.

        abstract_state: ShapeDtypeStructs (with shardings) to restore onto; None
          restores the arrays as saved, onto this process's first device (readers
          such as eval_glue.py, whatever layout saved them).
        check_config: called with the saved config before any array is read; it
          raises to refuse a checkpoint of another run.
        Damaged checkpoints are set aside (see module docstring) and the previous
        one is tried; an intact one that does not fit raises CheckpointError.
        Readers of another run, live or not, go through training.checkpoint_reader.
        """
        if step is None and not self.all_steps():
            raise CheckpointError(f"{self.named}: no checkpoint to restore")
        self.damaged = []  # this call's, not an earlier one's
        tried: set[int] = set()
        while (candidate := self._next_candidate(step, tried)) is not None:
            tried.add(candidate)
            try:
                verified = self.verify(candidate)
                config = self._restore_config(candidate)
            except Exception as e:  # noqa: BLE001 - unreadable or damaged
                self.damaged.append(self._damaged(candidate, e))
                continue
            if check_config is not None:
                check_config(config)
            if verified and abstract_state is not None:
                self._check_shapes(candidate, abstract_state)
            try:
                target = abstract_state
                if target is None:
                    target = self._as_saved(candidate)
                restored = self.manager.restore(
                    candidate, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))
            except Exception as e:  # noqa: BLE001
                if verified:  # intact files that do not fit: not damage, do not move them
                    raise CheckpointError(
                        f"{self.shown(candidate)} does not fit this run's state "
                        f"(another architecture or version of this code?): "
                        f"{type(e).__name__}: {_first_line(e)}") from e
                self.damaged.append(self._damaged(candidate, e))
                continue
            return restored["state"], config, candidate
        if step is not None and not self.damaged:
            raise CheckpointError(f"{self.shown(step)}: no such checkpoint")
        raise CheckpointError(f"{self.named}: no checkpoint restores; damaged: "
                              + "; ".join(self.damaged))

    def _next_candidate(self, step: int | None, tried: set[int]) -> int | None:
        """`step` once, or the newest step not tried yet."""
        if step is not None:
            return None if step in tried else step
        steps = [s for s in reversed(self.all_steps()) if s not in tried]
        return steps[0] if steps else None

    def _restore_config(self, step: int) -> dict:
        restored = self.manager.restore(
            step, args=ocp.args.Composite(config=ocp.args.JsonRestore()))
        config = restored["config"]
        if not isinstance(config, dict):
            raise CheckpointError(f"{self.shown(step)}/config holds no JSON object")
        return dict(config)

    def _check_shapes(self, step: int, abstract_state: Any) -> None:
        """An intact checkpoint whose arrays' shapes are not the state's does not fit:
        said before orbax reads it (its failed read leaves callbacks firing into a closed
        event loop, printed as tracebacks). The shapes are compared as multisets, so
        that a tree orbax would still map onto the state is never refused here."""
        try:
            saved = jax.tree.leaves(self.manager.item_metadata(step)["state"])
        except Exception:  # noqa: BLE001 - no metadata to compare: orbax's restore decides
            return
        wanted = jax.tree.leaves(abstract_state)
        saved_shapes = sorted(tuple(m.shape) for m in saved)
        wanted_shapes = sorted(tuple(x.shape) for x in wanted)
        if saved_shapes != wanted_shapes:
            extra = sorted(set(saved_shapes) - set(wanted_shapes))[:3]
            missing = sorted(set(wanted_shapes) - set(saved_shapes))[:3]
            raise CheckpointError(
                f"{self.shown(step)} does not fit this run's state (another architecture or "
                f"version of this code?): {len(saved)} arrays saved, {len(wanted)} expected; "
                f"shapes saved only {extra or 'none'}, expected only {missing or 'none'}")

    def _as_saved(self, step: int) -> Any:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        metadata = self.manager.item_metadata(step)["state"]
        return jax.tree.map(
            lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), metadata)

    def _damaged(self, step: int, error: Exception) -> str:
        where = self.set_aside(step)
        moved = f"; moved to {where}" if where else ""
        reason = f"{type(error).__name__}: {_first_line(error)}"
        if not self.read_only:  # a reader (checkpoint_reader) says it in its own words
            logging.warning("checkpoint %s is damaged (%s)%s; trying the previous one",
                            self.shown(step), reason, moved)
        return f"{self.shown(step)} ({reason}){moved}"

    def wait(self) -> None:
        """Until every save in flight is on disk (and its metrics readable)."""
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()


def read_manifest(step_directory: str, shown: str | None = None) -> dict[str, str] | None:
    """A step's checksums (relative path -> sha256); None when it has none (saved by an
    older version). Raises FileNotFoundError when the step itself is gone."""
    manifest = os.path.join(step_directory, CHECKSUMS)
    try:
        with open(manifest) as f:
            expected = json.load(f)
    except FileNotFoundError:
        if not os.path.isdir(step_directory):
            raise
        return None
    except (OSError, ValueError) as e:
        where = os.path.join(shown or step_directory, CHECKSUMS)
        raise CheckpointError(f"{where} is unreadable ({e})") from e
    if not isinstance(expected, dict):
        raise CheckpointError(f"{os.path.join(shown or step_directory, CHECKSUMS)} holds no "
                              "JSON object")
    return expected


def _first_line(error: Exception) -> str:
    text = str(error)
    return text.splitlines()[0] if text else ""
