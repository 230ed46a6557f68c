"""One run per workdir: an exclusive lock held for the life of the process.

`fcntl.flock` locks belong to the open file, so the kernel drops them when the
process dies however it dies (kill -9 included): a stale lock file never blocks a
rerun. On several processes only process 0 locks (they share one workdir by design).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator

import jax


class WorkdirBusy(ValueError):
    """Another live process holds the workdir."""


class WorkdirError(ValueError):
    """A --workdir that cannot be one."""


@contextlib.contextmanager
def started(workdir: str) -> Iterator[None]:
    """Creates `workdir` for a run; when the run fails (any exception, signals included)
    having made nothing in it but folders and the lock, removes it again, so a failed
    start leaves no empty workdir that looks like a run. A workdir that existed before,
    or that holds any file of the run (a checkpoint, a cached tokenizer), stays."""
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise WorkdirError(f"--workdir={workdir} is a file, not a directory")
    existed = os.path.isdir(workdir)
    os.makedirs(workdir, exist_ok=True)
    try:
        yield
    except BaseException:
        if not existed and jax.process_index() == 0 and _only_folders_and_lock(workdir):
            shutil.rmtree(workdir, ignore_errors=True)
        raise


def _only_folders_and_lock(workdir: str) -> bool:
    for directory, _, files in os.walk(workdir):
        if any(not (directory == workdir and name == WorkdirLock.NAME) for name in files):
            return False
    return True


class WorkdirLock:
    NAME = ".lock"

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, self.NAME)
        self._file = None

    def __enter__(self) -> WorkdirLock:
        if jax.process_index() != 0:
            return self
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise WorkdirBusy(f"{os.path.dirname(self.path)} is in use by {holder}; wait for "
                              f"it to end or use another --workdir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {os.uname().nodename} since "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        self._file = handle
        return self

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
