"""Orbax checkpoints: the train state (params, optimizer state, step) plus the
run's config as JSON, keeping the last K and the best by a metric.

Orbax writes each step into a temporary directory and renames it when complete,
so a run killed mid-save leaves no checkpoint that looks finished. A latest
checkpoint that still fails to restore is skipped with a warning naming it, and
the one before is used.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging
from orbax.checkpoint import checkpoint_managers as policies


class _DropReadOnlyNotices:
    """Orbax warns on every read-only open; eval_glue.py opens read-only by design."""

    def filter(self, record) -> bool:
        message = record.getMessage()
        return "read_only=True" not in message and "directory is read only" not in message


logging.get_absl_logger().addFilter(_DropReadOnlyNotices())


class CheckpointError(ValueError):
    """A checkpoint that is missing or does not fit; the message names the path."""


class Checkpointer:
    def __init__(
        self,
        directory: str,
        keep_last: int = 3,
        best_metric: str | None = None,
        best_mode: str = "min",
        read_only: bool = False,
    ):
        self.directory = os.path.abspath(directory)
        keep = [policies.LatestN(n=max(keep_last, 1))]
        if best_metric:
            keep.append(
                policies.BestN(
                    get_metric_fn=lambda metrics: metrics[best_metric],
                    reverse=best_mode == "max",
                    n=1,
                    keep_checkpoints_without_metrics=False,
                )
            )
        options = ocp.CheckpointManagerOptions(
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

    # -- save / restore -----------------------------------------------------------
    def save(self, step: int, state: Any, config: dict[str, Any], metrics=None) -> None:
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

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict, int]:
        """(state, config, step) from `step` or the newest checkpoint that restores."""
        candidates = [step] if step is not None else list(reversed(self.all_steps()))
        if not candidates:
            raise CheckpointError(f"{self.directory}: no checkpoint to restore")
        last_error: Exception | None = None
        for candidate in candidates:
            try:
                restored = self.manager.restore(
                    candidate,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardRestore(abstract_state),
                        config=ocp.args.JsonRestore(),
                    ),
                )
                return restored["state"], dict(restored["config"]), candidate
            except Exception as e:  # noqa: BLE001 - any failure means "unusable"
                last_error = e
                logging.warning(
                    "checkpoint %s is unreadable (%s: %s); trying the previous one",
                    os.path.join(self.directory, str(candidate)), type(e).__name__,
                    str(e).splitlines()[0] if str(e) else "",
                )
        raise CheckpointError(
            f"{self.directory}: no checkpoint restores (last error: {last_error})"
        )

    def saved_config(self, step: int | None = None) -> dict:
        """The run config stored with a checkpoint (cheap: no arrays are read)."""
        step = step if step is not None else self.latest_step()
        only_config = ocp.args.Composite(config=ocp.args.JsonRestore())
        restored = self.manager.restore(step, args=only_config)
        return dict(restored["config"])

    def restore_raw(self, step: int | None = None) -> tuple[dict, dict, int]:
        """(state as nested dicts of arrays, config, step) without a target structure."""
        step = step if step is not None else self.latest_step()
        if step is None:
            raise CheckpointError(f"{self.directory}: no checkpoint to restore")
        # Restore onto this process's first device whatever layout (device count,
        # process count) saved it: readers such as eval_glue.py need plain arrays.
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        metadata = self.manager.item_metadata(step)["state"]
        target = jax.tree.map(
            lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), metadata)
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target), config=ocp.args.JsonRestore()
            ),
        )
        return restored["state"], dict(restored["config"]), step

    def close(self) -> None:
        self.manager.close()
