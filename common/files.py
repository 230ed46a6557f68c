"""The one atomic file writer: write to a temporary name beside the target, sync, then
rename, so a process killed mid-write never leaves a file that looks complete, and a
failed write leaves the old file (or none) and no temporary behind.

Every single file the project writes for others to read goes through here: results
(training/results.py), checkpoint checksums, config.json, the run's tokenizer copy,
GLUE submissions, the probes' JSON and plots. (input_pipeline/cache.py's atomic
*directories* and orbax's checkpoints are a different mechanism.) Standard library
only, so cheap readers (scripts/sweep.py, `python -m training.results`) stay free of
JAX."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary path beside `path` for the caller to write; synced and renamed onto
    `path` when the block ends, removed when it raises.

        with atomic_path("plot.png") as tmp:
            figure.savefig(tmp)           # the extension is kept: tools choose formats by it

    The file gets the mode a plain open() would give (0666 minus the umask).
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    stem, ext = os.path.splitext(os.path.basename(path))
    tmp = os.path.join(directory, f".{stem}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{ext}")
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(path) as tmp, open(tmp, "xb") as f:
        f.write(data)


def write_text_atomic(path: str | os.PathLike[str], text: str, newline: str | None = None
                      ) -> None:
    """UTF-8 text; `newline` as open()'s (None: the platform's)."""
    with atomic_path(path) as tmp, open(tmp, "x", encoding="utf-8", newline=newline) as f:
        f.write(text)


def write_json_atomic(path: str | os.PathLike[str], value: Any) -> None:
    """Strict JSON (no NaN or Infinity, which other readers refuse): a non-finite number
    is the writer's bug, named with the file."""
    try:
        text = json.dumps(value, indent=2, default=str, allow_nan=False)
    except ValueError as e:
        raise ValueError(f"{os.fspath(path)}: {e}") from e
    write_text_atomic(path, text + "\n")


def copy_file_atomic(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    with atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)


@contextlib.contextmanager
def replaced_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary directory beside `path` for the caller to fill; when the block ends
    its files are synced and it takes `path`'s place, an old `path` being removed only
    once the new one is in. When the block raises, the temporary directory is removed
    and `path` is as it was.

        with replaced_directory("export") as tmp:
            (tmp / "config.json").write_text(...)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkdir, not mkdtemp: the directory gets a plain mkdir's mode (0777 minus the umask).
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        yield tmp
        for file in tmp.rglob("*"):
            if file.is_file():
                with open(file, "rb") as f:
                    os.fsync(f.fileno())
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            os.rename(path, old)
        os.rename(tmp, path)
        if old is not None:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename
