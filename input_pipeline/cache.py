"""On-disk cache of packed arrays (.npy), written so that it is complete or absent.

A cache entry is a directory `<cache_dir>/packed-<key>/` holding, per split,
`{split}_input_ids.npy`, `{split}_token_type_ids.npy`, `{split}_lengths.npy`, plus
`meta.json` and the marker file `COMPLETE`. It is built in a temporary sibling
directory, the marker is written last, and the directory is then renamed into place;
a reader trusts only directories with the marker, so a killed run never leaves
anything that looks complete. Concurrent builders (several hosts on a shared
filesystem) each build their own temporary copy; the first rename wins.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from input_pipeline.packing import PackedSplit

COMPLETE = "COMPLETE"
ARRAYS = ("input_ids", "token_type_ids", "lengths")
# Bump when packing or the file layout changes for the same inputs.
CACHE_VERSION = 1


def cache_key(*parts: Any) -> str:
    """A short stable hash of json-able parts."""
    blob = json.dumps([CACHE_VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def is_complete(path: str | os.PathLike) -> bool:
    return (Path(path) / COMPLETE).is_file()


@contextlib.contextmanager
def atomic_directory(final: str | os.PathLike) -> Iterator[Path]:
    """Yields a temporary directory; on success marks it complete and renames it to
    `final`. On error the temporary directory is removed and `final` is untouched."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))
    try:
        yield tmp
        (tmp / COMPLETE).write_text("ok\n")
        if final.exists() and not is_complete(final):
            shutil.rmtree(final)  # left by a killed run
        try:
            os.rename(tmp, final)
        except OSError:
            if not is_complete(final):  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename


def save_packed(path: str | os.PathLike, splits: dict[str, PackedSplit],
                meta: dict[str, Any]) -> None:
    """Writes the splits and meta.json as one complete cache entry at `path`."""
    with atomic_directory(path) as tmp:
        for name, split in splits.items():
            for field in ARRAYS:
                np.save(tmp / f"{name}_{field}.npy", getattr(split, field))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def load_packed(path: str | os.PathLike,
                splits: tuple[str, ...] = ("train", "eval")) -> dict[str, PackedSplit] | None:
    """The cached splits as read-only memory maps, or None if the entry is not complete."""
    path = Path(path)
    if not is_complete(path):
        return None
    try:
        return {name: PackedSplit(*(np.load(path / f"{name}_{f}.npy", mmap_mode="r")
                                    for f in ARRAYS)) for name in splits}
    except (OSError, ValueError):  # marker present but files damaged: rebuild
        return None


def load_meta(path: str | os.PathLike) -> dict[str, Any]:
    return json.loads((Path(path) / "meta.json").read_text())
