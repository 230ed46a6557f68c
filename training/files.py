"""Atomic result files: written to a temporary name, synced, then renamed, so a run
killed mid-write never leaves a file that looks complete. Standard library only,
so cheap readers (scripts/sweep.py, configs/sweeps.py) can use it without JAX."""

from __future__ import annotations

import json
import os
from typing import Any


def write_text_atomic(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: str, value: Any) -> None:
    write_text_atomic(path, json.dumps(value, indent=2, default=str) + "\n")
