"""Reading another run's checkpoints (fine-tuning, export, analysis), also while that
run is still training and saving and removing them.

A live run's checkpoints/ changes under a reader: orbax's own listing and reading meet
steps half written, renamed or removed, and print their failures from worker threads.
So a reader never hands the live folder to orbax. It lists the complete steps itself
(a step's checksums, `sha256sums.json`, are written after orbax finished it, and a
finished step is never changed again, only removed), hard-links one step's files into
a private snapshot beside the run's folders (copies them where it cannot link) and
restores from the snapshot, which nothing else touches: the files stay readable even
when the run removes the step meanwhile. A step removed before all its files are
linked was removed while reading, not damaged: the reader says so and takes the newest
complete step then.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from typing import Any, NamedTuple

from absl import logging

from common.errors import CheckpointError
from training.checkpoints import CHECKSUMS, Checkpointer, read_manifest

# How long a file missing from a listed step may take to be explained by the step's
# removal (the run deletes a step file by file, then its folder) before the step counts
# as damaged.
REMOVAL_GRACE_S = 2.0
# How long a finished step may go without its checksums (the run hashes it: about a
# second per GB) before it counts as saved by an older version that wrote none.
CHECKSUMS_WAIT_S = 60.0
_WITHOUT_CHECKSUMS: set[str] = set()  # folders judged so: waited for once per process
SNAPSHOT_PREFIX = ".reading-"


class RestoredRun(NamedTuple):
    state: Any  # as saved, on this process's first device
    config: dict
    step: int
    directory: str  # the step's directory, for messages


class _Removed(Exception):
    """The step's directory went away while it was being linked."""


def restore_run(workdir: str, step: int | str | None = None, name: str | None = None,
                subdir: str = "checkpoints") -> RestoredRun:
    """A run's checkpoint from its checkpoints/ (or `subdir`), for readers (fine-tuning,
    export, analysis scripts): `step`; "best", the lowest eval_loss saved (the newest
    when none was); else the newest complete one that restores. name: how errors name
    the run (default: the workdir)."""
    name = name or workdir
    directory = os.path.join(workdir, subdir)
    if not os.path.isdir(directory):
        raise CheckpointError(f"{name}: no {subdir}/ (not a pretraining run?)")
    steps = complete_steps(directory)
    if not steps:
        raise CheckpointError(f"{name}: {subdir}/ holds no checkpoint")
    if step == "best":
        step = _best_step(directory)
    elif step is not None and int(step) not in steps:
        raise CheckpointError(f"{name}: no checkpoint at step {step} (it has "
                              f"{', '.join(map(str, steps))})")
    return _restore_newest(directory, None if step is None else int(step), name)


def complete_steps(directory: str) -> list[int]:
    """The steps whose checksums are written (orbax finished them), ascending; where no
    step has them (checkpoints of older versions of this code), every finished step."""
    return _listing(directory)[0]


def _listing(directory: str) -> tuple[list[int], bool]:
    """(complete steps, whether they were listed by their checksums). Where no step has
    checksums but one was finished less than CHECKSUMS_WAIT_S ago, the run is hashing
    it (a live run keeping one checkpoint has no other then): waits for them."""
    deadline = time.monotonic() + CHECKSUMS_WAIT_S
    while True:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return [], False
        steps = sorted(int(n) for n in names if n.isdigit())
        complete = [s for s in steps
                    if os.path.exists(os.path.join(directory, str(s), CHECKSUMS))]
        if complete or not steps:
            return complete, True
        if (directory in _WITHOUT_CHECKSUMS or time.monotonic() > deadline
                or _age_s(directory, steps[-1]) > CHECKSUMS_WAIT_S):
            _WITHOUT_CHECKSUMS.add(directory)
            return steps, False
        time.sleep(0.1)


def _age_s(directory: str, step: int) -> float:
    try:
        return time.time() - os.path.getmtime(os.path.join(directory, str(step)))
    except FileNotFoundError:
        return 0.0


def _restore_newest(directory: str, step: int | None, name: str) -> RestoredRun:
    """`step`, or the newest complete step that restores, each read from a snapshot; a
    damaged step gives way to the one before (named in a warning), one that does not
    fit this code raises."""
    tried: set[int] = set()
    damaged: list[str] = []
    while True:
        candidate, with_checksums = _next(directory, step, tried)
        if candidate is None:
            break
        tried.add(candidate)
        shown = os.path.join(directory, str(candidate))
        with _Snapshot(directory) as snapshot:
            try:
                snapshot.take(candidate, with_checksums)
            except _Removed:
                logging.warning("checkpoint %s was removed while reading it (the run that "
                                "owns it keeps fewer); taking the newest complete one", shown)
                continue
            except CheckpointError as e:
                damaged.append(_note_damage(shown, e))
                continue
            checkpointer = Checkpointer(snapshot.root, read_only=True, named=directory)
            try:
                state, config, _ = checkpointer.restore(step=candidate)
            except CheckpointError as e:
                if not checkpointer.damaged:  # intact but does not fit this code
                    raise
                damaged.append(_note_damage(shown, e))
                continue
            finally:
                checkpointer.close()
        return RestoredRun(state, config, candidate, shown)
    if step is not None and not damaged:
        raise CheckpointError(f"{name}: checkpoint {step} was removed while reading it")
    raise CheckpointError(f"{name}: no checkpoint restores; "
                          + ("; ".join(damaged) or "all were removed while reading them"))


def _next(directory: str, step: int | None, tried: set[int]) -> tuple[int | None, bool]:
    """(`step` once, or the newest complete step not tried yet, listed anew each time;
    whether it was listed by its checksums)."""
    steps, with_checksums = _listing(directory)
    if step is not None:
        return (None if step in tried else step), with_checksums
    steps = [s for s in reversed(steps) if s not in tried]
    return (steps[0] if steps else None), with_checksums


def _note_damage(shown: str, error: CheckpointError) -> str:
    logging.warning("checkpoint %s is damaged (%s); trying the previous one", shown, error)
    return f"{shown} ({error})"


def _best_step(directory: str) -> int | None:
    """The complete step with the lowest eval_loss saved with it (orbax keeps it in the
    step's metadata), read from a snapshot of the steps (None when no step carries
    one: the newest then)."""
    with _Snapshot(directory) as snapshot:
        steps, with_checksums = _listing(directory)
        taken = []
        for step in steps:
            try:
                snapshot.take(step, with_checksums)
                taken.append(step)
            except (_Removed, CheckpointError):
                continue
        if not taken:
            return None
        checkpointer = Checkpointer(snapshot.root, read_only=True, named=directory)
        try:
            return checkpointer.best_step("eval_loss")
        finally:
            checkpointer.close()


class _Snapshot:
    """A private folder of hard links to (or copies of) steps' files, removed on exit.

    It sits beside the run's checkpoints folder (hard links need the same file system)
    unless that folder's parent is not writable, in the system's temporary folder then.
    """

    def __init__(self, directory: str):
        self.directory = directory
        self.root = ""

    def __enter__(self) -> _Snapshot:
        parent = os.path.dirname(os.path.abspath(self.directory))
        _remove_abandoned(parent)
        prefix = f"{SNAPSHOT_PREFIX}{socket.gethostname()}-{os.getpid()}-"
        try:
            self.root = tempfile.mkdtemp(prefix=prefix, dir=parent)
        except OSError:
            self.root = tempfile.mkdtemp(prefix=prefix)
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def take(self, step: int, with_checksums: bool) -> None:
        """Links the step's files: those its checksums list (with_checksums: it had them
        when listed), or every file (saved without them). Raises _Removed when the step
        goes away meanwhile, CheckpointError naming a file that stays missing."""
        source = os.path.join(self.directory, str(step))
        copy = os.path.join(self.root, str(step))
        os.makedirs(copy, exist_ok=True)
        try:
            names = self._listed_files(source, copy, with_checksums)
        except FileNotFoundError as e:
            raise _Removed() from e
        for relative in names:
            target = os.path.join(copy, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                _link_or_copy(os.path.join(source, relative), target)
            except FileNotFoundError as e:
                if _being_removed(source):
                    raise _Removed() from e
                raise CheckpointError(f"{os.path.join(source, relative)} is missing") from e

    @staticmethod
    def _listed_files(source: str, copy: str, with_checksums: bool) -> list[str]:
        """The files the step's checksums name, its checksums linked first (the list is
        read from the link, which the run cannot remove); a step saved without them
        (an older version of this code): all its files."""
        try:
            _link_or_copy(os.path.join(source, CHECKSUMS), os.path.join(copy, CHECKSUMS))
        except FileNotFoundError:
            if with_checksums:  # gone since: the run is removing it (else it is damaged)
                if _being_removed(source):
                    raise
                raise CheckpointError(f"{os.path.join(source, CHECKSUMS)} is missing") from None
            if not os.path.isdir(source):
                raise
            return sorted(os.path.relpath(os.path.join(root, f), source)
                          for root, _, files in os.walk(source) for f in files)
        return sorted(read_manifest(copy, shown=source))


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except FileNotFoundError:  # the caller tells removal from damage
        raise
    except OSError:  # another file system, or links not allowed: a copy is as private
        shutil.copyfile(source, target)


def _being_removed(step_directory: str) -> bool:
    """True once the step's directory is gone, waiting up to REMOVAL_GRACE_S for a
    removal in progress to finish."""
    deadline = time.monotonic() + REMOVAL_GRACE_S
    while os.path.isdir(step_directory):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _remove_abandoned(parent: str) -> None:
    """Snapshots of this host's readers that died before removing theirs (kill -9)."""
    host = socket.gethostname()
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(f"{SNAPSHOT_PREFIX}{host}-"):
            continue
        pid = name[len(SNAPSHOT_PREFIX) + len(host) + 1:].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    return True
