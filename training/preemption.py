"""SIGTERM/SIGINT become "checkpoint now and exit" instead of a lost run.

The handler only sets a flag; the training loop checks it after each step, so
the saved state is always a whole step. A second signal restores the default
behaviour (a stuck run can still be killed). With several processes the flag
is OR-ed across them, so every process saves the same step.
"""

from __future__ import annotations

import signal
import threading

import jax
import numpy as np


class PreemptionFlag:
    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> PreemptionFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame) -> None:
        self.signal_name = signal.Signals(signum).name
        signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))

    def requested(self) -> bool:
        local = self.signal_name is not None
        if jax.process_count() == 1:
            return local
        from jax.experimental import multihost_utils

        return bool(np.max(multihost_utils.process_allgather(np.int32(local))))
