"""One run per workdir: an exclusive lock held for the life of the process.

`fcntl.flock` locks belong to the open file, so the kernel drops them when the
process dies however it dies (kill -9 included): a stale lock file never blocks a
rerun. On several processes only process 0 locks (they share one workdir by design).
"""

from __future__ import annotations

import fcntl
import os
import time

import jax


class WorkdirBusy(ValueError):
    """Another live process holds the workdir."""


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
