"""The persistent XLA compilation cache, on by default for every entry point.

A BERT-base train step takes tens of seconds to compile on a GPU, and a sweep or a
rerun compiles the very same program again. With the cache, the second process that
compiles a program reads the executable from disk instead; on GPU the autotuning
results are kept there too (`jax_persistent_cache_enable_xla_caches`), so a cached
start also skips the autotuner.

Where it lives: `JAX_COMPILATION_CACHE_DIR` when the environment names one (a sweep's
shared cache, the tests' one), else a folder of the user's cache directory
(`$XDG_CACHE_HOME/bert-attention-ablations/jax`, by default `~/.cache/...`). A setting
of `none` turns it off; any other setting is the folder itself.

The thresholds are zeroed: JAX's default caches only programs over one second, which
leaves out exactly the many small programs (parameter init, evals) of a short run.
Results never depend on the cache: an entry is keyed by the program, the compiler
options, the backend and the jax version.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

OFF = ("none", "off", "false", "")
GPU_XLA_CACHES = "xla_gpu_per_fusion_autotune_cache_dir"  # autotuning results only
AUTO = "auto"
ENV = "JAX_COMPILATION_CACHE_DIR"


def default_directory() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bert-attention-ablations", "jax")


def resolve(setting: str | None) -> str | None:
    """'auto' (or None) -> $JAX_COMPILATION_CACHE_DIR or the user cache folder;
    'none' -> None (off); anything else -> that folder, absolute."""
    setting = AUTO if setting is None else str(setting).strip()
    if setting.lower() in OFF:
        return None
    if setting == AUTO:
        return os.path.abspath(os.environ.get(ENV) or default_directory())
    return os.path.abspath(os.path.expanduser(setting))


def enable(setting: str | None = AUTO) -> str | None:
    """Points JAX's persistent compilation cache at `setting` (see resolve) before the
    first compile; returns the folder in use, or None when the cache is off. Safe to
    call again (the last call wins for compiles after it)."""
    import jax

    directory = resolve(setting)
    if directory is None:
        jax.config.update("jax_compilation_cache_dir", None)
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    os.makedirs(directory, exist_ok=True)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    # GPU: the autotuning results beside the executables, so a cached start does not
    # autotune again (no effect on CPU and TPU). Not "all": that adds XLA's kernel cache
    # (xla_gpu_kernel_cache_file), which JAX leaves off by default as broken beside its
    # own cache, and which on an H200 (jax 0.11.2) made the first kernel of a fresh
    # process fail with CUDA_ERROR_ILLEGAL_INSTRUCTION (docs/PERFORMANCE.md, the GPU run
    # of 2026-12-04).
    jax.config.update("jax_persistent_cache_enable_xla_caches", GPU_XLA_CACHES)
    _reset_if_initialized()
    return directory


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """No persistent cache inside (a compile timed there is a compile, not a read); the
    settings as they were after."""
    import jax

    names = ("jax_enable_compilation_cache", "jax_compilation_cache_dir")
    before = {name: getattr(jax.config, name) for name in names}
    enable("none")
    try:
        yield
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        _reset_if_initialized()


def _reset_if_initialized() -> None:
    """JAX opens the cache at the first compile of a process; a later enable() with
    another folder must reopen it there."""
    try:
        from jax._src import compilation_cache
    except ImportError:  # pragma: no cover - a jax without the private module
        return
    reset = getattr(compilation_cache, "reset_cache", None)
    # Checked counts too: a compile before the first enable() decides "no cache" for the
    # process (jax keeps that answer) without opening one.
    if reset is not None and (getattr(compilation_cache, "_cache_initialized", False)
                              or getattr(compilation_cache, "_cache_checked", False)):
        reset()


def describe(directory: str | None) -> str:
    """The one line an entry point prints at its start: where compiled programs are
    read from and written to, or that they are not."""
    if directory is None:
        return "compilation cache: off (jax_cache=none): every program is compiled"
    return f"compilation cache: {directory} (jax_cache=none turns it off)"
