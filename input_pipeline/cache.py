"""On-disk cache of packed arrays, written so that it is complete or absent, and checked
when read.

A cache entry is a directory `<cache_dir>/packed-<key>/` holding, per split, the raw
little-endian arrays `{split}_input_ids.bin` (uint16 or int32 [N, L]),
`{split}_token_type_ids.bin` (int8 [N, L]) and `{split}_lengths.bin` (int32 [N]),
plus `meta.json` (build settings, counts, and each array's dtype, shape and SHA-256 per
64 MiB chunk) and the marker file `COMPLETE`. Raw files, not .npy, because rows are
appended while the corpus streams through and the row count is known only at the end;
meta.json holds the shapes instead of a header.

Writing: the entry is built in a temporary sibling directory
(`.packed-<key>.tmp-<host>-<pid>-<random>`), the marker is written last, and the
directory is then renamed into place, so a killed run never leaves anything that looks
complete. Concurrent builders (several hosts on a shared filesystem) each build their
own temporary copy; the first rename wins and the others use the winner's entry. A
builder cleans up temporary directories that dead processes on its host left behind.

Reading: every array's size and every chunk's SHA-256 is verified (threads in parallel;
hashlib releases the GIL), so flipped bits or a truncated file are found before they
become token ids out of range (about 8 s for 20 GB on 2 cores, docs/INGEST.md). A
damaged entry (or unreadable meta.json, or a missing marker) is never deleted: it is
renamed to `packed-<key>.damaged-<time>-<pid>`, one warning names the damaged file,
and the caller rebuilds.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from absl import logging

from input_pipeline.errors import CacheError
from input_pipeline.packing import PackedSplit

COMPLETE = "COMPLETE"
META = "meta.json"
FIELDS = ("input_ids", "token_type_ids", "lengths")
SPLITS = ("train", "eval")
# Bump when packing or the file layout changes for the same inputs.
# 2: raw .bin arrays with checksums in meta.json, uint16 ids, streaming eval split.
CACHE_VERSION = 2
HASH_CHUNK_BYTES = 64 << 20  # one checksum per this many bytes of an array
_READ_BYTES = 4 << 20  # read size while hashing: bounded memory per thread
_HASH_THREADS = min(8, os.cpu_count() or 1)


class DamagedEntry(Exception):  # noqa: N818 - a state found, not a failure to report as is
    """A cache entry that is present but not intact; `file` is the first bad file."""

    def __init__(self, file: Path, reason: str):
        super().__init__(f"{file}: {reason}")
        self.file = file
        self.reason = reason


def cache_key(*parts: Any) -> str:
    """A short stable hash of json-able parts."""
    blob = json.dumps([CACHE_VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def is_complete(path: str | os.PathLike) -> bool:
    return (Path(path) / COMPLETE).is_file()


# --------------------------------------------------------------------------------------
# Atomic entries
# --------------------------------------------------------------------------------------


def _tmp_prefix(final: Path) -> str:
    return f".{final.name}.tmp-{socket.gethostname()}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_tmp(final: Path) -> None:
    """Removes temporary build directories of `final` left by dead processes on this
    host (a kill -9 skips every cleanup). Other hosts' are left alone: their builders
    may be alive."""
    prefix = _tmp_prefix(final)
    for path in final.parent.glob(f"{glob_escape(prefix)}*"):
        pid = path.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def set_aside(entry: Path, damage: DamagedEntry) -> Path | None:
    """Renames a damaged entry out of the way (never deletes it) with one warning."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = entry.with_name(f"{entry.name}.damaged-{stamp}-{os.getpid()}")
    try:
        os.rename(entry, aside)
    except FileNotFoundError:
        return None  # another process set it aside first
    except OSError as e:
        raise CacheError(f"cache: {damage}; cannot set {entry} aside: "
                         f"{e.strerror or e}") from e
    logging.warning("data: damaged cache entry: %s; set aside as %s, rebuilding", damage, aside)
    return aside


@contextlib.contextmanager
def atomic_directory(final: str | os.PathLike) -> Iterator[Path]:
    """Yields a temporary directory; on success marks it complete and renames it to
    `final`. On error the temporary directory is removed and `final` is untouched.
    If another process completed `final` first, that entry stays and ours is dropped."""
    final = Path(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_tmp(final)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f"{_tmp_prefix(final)}"
                                                             f"{os.getpid()}-"))
    except OSError as e:
        raise CacheError(f"cache: cannot create a directory in {final.parent}: "
                         f"{e.strerror or e}") from e
    try:
        yield tmp
        with writing(tmp / COMPLETE):
            (tmp / COMPLETE).write_text("ok\n")
        if final.exists() and not is_complete(final):  # not ours to delete
            set_aside(final, DamagedEntry(final / COMPLETE, "marker missing"))
        try:
            os.rename(tmp, final)
        except OSError as e:
            if not is_complete(final):  # not a lost race: a real failure
                raise CacheError(f"cache: cannot rename {tmp} to {final}: "
                                 f"{e.strerror or e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


def append_array(f: BinaryIO, array: np.ndarray) -> None:
    """Appends an array's bytes (C order, native little-endian) to an open file."""
    f.write(memoryview(np.ascontiguousarray(array)).cast("B"))


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turns an OSError (ENOSPC, EDQUOT, EFBIG, EIO, ...) into one line naming the file."""
    try:
        yield
    except OSError as e:
        raise CacheError(f"cache: cannot write {path}: {e.strerror or e}") from e


class SplitWriter:
    """Appends packed rows of one split to its three .bin files."""

    def __init__(self, directory: Path, name: str, max_seq_length: int, dtype: np.dtype):
        self.name = name
        self.max_seq_length = max_seq_length
        self.dtypes = {"input_ids": np.dtype(dtype), "token_type_ids": np.dtype(np.int8),
                       "lengths": np.dtype(np.int32)}
        self.paths = {f: directory / f"{name}_{f}.bin" for f in FIELDS}
        self.rows = 0
        self._files: dict[str, BinaryIO] = {}
        for field, path in self.paths.items():
            with writing(path):
                self._files[field] = open(path, "wb")  # noqa: SIM115 - closed by close()

    def write(self, split: PackedSplit) -> None:
        if not len(split):
            return
        for field in FIELDS:
            with writing(self.paths[field]):
                append_array(self._files[field],
                             np.asarray(getattr(split, field), self.dtypes[field]))
        self.rows += len(split)

    def shape(self, field: str) -> tuple[int, ...]:
        return (self.rows,) if field == "lengths" else (self.rows, self.max_seq_length)

    def _row_bytes(self, field: str) -> int:
        width = 1 if field == "lengths" else self.max_seq_length
        return width * self.dtypes[field].itemsize

    def move_tail_to(self, other: SplitWriter, num_rows: int, batch_rows: int = 1 << 16) -> None:
        """Moves the last num_rows rows (in order) to the end of `other`, in batches."""
        keep = self.rows - num_rows
        for field in FIELDS:
            f, path, row_bytes = self._files[field], self.paths[field], self._row_bytes(field)
            with writing(path):
                f.flush()
                with open(path, "rb") as src:
                    src.seek(keep * row_bytes)
                    for _ in range(keep, self.rows, batch_rows):
                        data = src.read(batch_rows * row_bytes)
                        with writing(other.paths[field]):
                            other._files[field].write(data)
                f.seek(keep * row_bytes)
                f.truncate()
        other.rows += num_rows
        self.rows = keep

    def close(self) -> None:
        for field, f in self._files.items():
            with writing(self.paths[field]):
                f.close()

    def lengths(self) -> np.ndarray:
        """The lengths of all rows written (read back; 4 bytes per row)."""
        return np.fromfile(self.paths["lengths"], np.int32)

    def describe(self) -> dict[str, dict[str, Any]]:
        """meta.json's record of this split's arrays (checksums read back from disk)."""
        out = {}
        for field, path in self.paths.items():
            out[f"{self.name}_{field}"] = {
                "dtype": self.dtypes[field].str, "shape": list(self.shape(field)),
                "chunk_bytes": HASH_CHUNK_BYTES, "sha256": checksums(path),
            }
        return out


def write_meta(directory: Path, meta: dict[str, Any]) -> None:
    path = directory / META
    with writing(path):
        path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------------------
# Checksums
# --------------------------------------------------------------------------------------


def _hash_range(path: Path, start: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(start)
        while size > 0:
            block = f.read(min(_READ_BYTES, size))
            if not block:
                break
            digest.update(block)
            size -= len(block)
    return digest.hexdigest()


def checksums(path: Path, chunk_bytes: int = HASH_CHUNK_BYTES) -> list[str]:
    """SHA-256 of each chunk_bytes piece of a file, hashed in parallel threads."""
    size = path.stat().st_size
    starts = range(0, max(size, 1), chunk_bytes)
    with concurrent.futures.ThreadPoolExecutor(_HASH_THREADS) as pool:
        return list(pool.map(lambda s: _hash_range(path, s, min(chunk_bytes, size - s)), starts))


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


def _read_meta(entry: Path) -> dict[str, Any]:
    path = entry / META
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise DamagedEntry(path, "missing") from e
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError included
        raise DamagedEntry(path, f"unreadable ({type(e).__name__}: {e})") from e
    arrays = meta.get("arrays") if isinstance(meta, dict) else None
    names = [f"{s}_{f}" for s in SPLITS for f in FIELDS]
    if not isinstance(arrays, dict) or any(not isinstance(arrays.get(n), dict) for n in names):
        raise DamagedEntry(path, "no record of the arrays")
    return meta


def verify_entry(entry: Path) -> dict[str, Any]:
    """meta.json of an intact entry; DamagedEntry naming the first bad file otherwise.

    Cost: reads and hashes every byte once, in up to _HASH_THREADS threads: 2.5 GB/s
    with 2 threads from the page cache (docs/INGEST.md), so about 8 s for a 20 GB
    cache, or as long as the disk needs to read it.
    """
    if not is_complete(entry):
        raise DamagedEntry(entry / COMPLETE, "marker missing")
    meta = _read_meta(entry)
    jobs = []
    for name, record in meta["arrays"].items():
        path = entry / f"{name}.bin"
        try:
            dtype, shape = np.dtype(record["dtype"]), [int(n) for n in record["shape"]]
            expected, chunk = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, \
                int(record["chunk_bytes"])
            digests = list(record["sha256"])
        except (KeyError, TypeError, ValueError) as e:
            raise DamagedEntry(entry / META, f"bad record for {name}") from e
        try:
            size = path.stat().st_size
        except OSError as e:
            raise DamagedEntry(path, e.strerror or str(e)) from e
        if size != expected:
            raise DamagedEntry(path, f"{size} bytes, expected {expected}")
        starts = list(range(0, max(size, 1), chunk))
        if len(starts) != len(digests):
            raise DamagedEntry(entry / META, f"bad checksum list for {name}")
        jobs += [(path, s, min(chunk, size - s), d) for s, d in zip(starts, digests, strict=True)]
    with concurrent.futures.ThreadPoolExecutor(_HASH_THREADS) as pool:
        try:
            results = list(pool.map(lambda j: _hash_range(*j[:3]) == j[3], jobs))
        except OSError as e:
            raise DamagedEntry(Path(e.filename or entry), e.strerror or str(e)) from e
    for (path, start, size, _), ok in zip(jobs, results, strict=True):
        if not ok:
            raise DamagedEntry(path, f"checksum mismatch in bytes {start}-{start + size}")
    return meta


def load_packed(entry: str | os.PathLike) -> tuple[dict[str, PackedSplit], dict[str, Any]] | None:
    """(splits as read-only memory maps, meta) of a verified entry; None if there is no
    entry; DamagedEntry if there is one but it is not intact."""
    entry = Path(entry)
    if not entry.exists():
        return None
    meta = verify_entry(entry)
    splits = {}
    for split in SPLITS:
        arrays = []
        for field in FIELDS:
            record = meta["arrays"][f"{split}_{field}"]
            shape = tuple(int(n) for n in record["shape"])
            path = entry / f"{split}_{field}.bin"
            if shape[0] == 0:  # np.memmap cannot map an empty file
                arrays.append(np.zeros(shape, np.dtype(record["dtype"])))
            else:
                arrays.append(np.memmap(path, np.dtype(record["dtype"]), "r", shape=shape))
        splits[split] = PackedSplit(*arrays)
    return splits, meta


def load_or_set_aside(entry: Path) -> tuple[dict[str, PackedSplit], dict[str, Any]] | None:
    """load_packed, but a damaged entry is set aside (warning naming the file) -> None."""
    try:
        return load_packed(entry)
    except DamagedEntry as damage:
        set_aside(entry, damage)
        return None
