"""The persistent compilation cache (common/compile_cache.py, config.jax_cache): a second
identical start of train.py reads every program from it and compiles nothing new;
jax_cache=none writes nothing, not even where $JAX_COMPILATION_CACHE_DIR points."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO, child_xla_flags, tiny_run_args


def train_py(workdir: str, corpus: str, cache: str, jax_cache: str,
             **environment: str) -> subprocess.CompletedProcess:
    """A 2-step tiny run on one CPU device."""
    env = {**os.environ, **environment}
    env["XLA_FLAGS"] = child_xla_flags()  # one device: a smaller program
    args = tiny_run_args(corpus, cache, steps=2, log_every_steps=1, eval_every_steps=2,
                         checkpoint_every_steps=2, jax_cache=jax_cache)
    done = subprocess.run([sys.executable, "train.py", "--config",
                           "configs/pretrain.py:size=micro", "--workdir", workdir, *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def files_under(directory: str) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), directory)
            for root, _, names in os.walk(directory) for name in names}


@pytest.mark.slow  # two train.py processes
def test_a_second_identical_start_compiles_nothing_new(run_corpus, tmp_path):
    """The same config in a new workdir: the first process filled the cache, the second
    read every program from it (it wrote no entry of its own)."""
    corpus, cache = run_corpus
    jax_cache = str(tmp_path / "jax_cache")  # its own, not the session's
    out = train_py(str(tmp_path / "first"), corpus, cache, jax_cache).stdout
    assert f"compilation cache: {jax_cache} " in out
    written = files_under(jax_cache)
    assert written  # the first start compiled and kept its programs
    # JAX logs every persistent-cache hit and miss at WARNING with these two switches: an
    # entry that is read back but rejected (a host-feature mismatch, jax-ml/jax#38445)
    # is a miss here even where it leaves the files as they were.
    second = train_py(str(tmp_path / "second"), corpus, cache, jax_cache,
                      JAX_LOG_COMPILES="1", JAX_EXPLAIN_CACHE_MISSES="1")
    assert files_under(jax_cache) == written
    assert "Persistent compilation cache hit for 'jit_train_step'" in second.stderr
    assert "PERSISTENT COMPILATION CACHE MISS" not in second.stderr


def test_the_gpu_caches_beside_the_executables_are_the_autotuning_results_only(tmp_path):
    """Not XLA's kernel cache ("all"): beside JAX's cache it is broken (JAX leaves it off
    by default), and on an H200 it failed the first kernel of a fresh process with
    CUDA_ERROR_ILLEGAL_INSTRUCTION."""
    import jax

    from common import compile_cache

    session = (jax.config.jax_compilation_cache_dir
               if jax.config.jax_enable_compilation_cache else None)
    try:
        compile_cache.enable(str(tmp_path / "cache"))
        assert (jax.config.jax_persistent_cache_enable_xla_caches
                == "xla_gpu_per_fusion_autotune_cache_dir")
    finally:
        compile_cache.enable(session or "none")


def test_jax_cache_none_writes_nothing_and_a_folder_takes_effect_at_once(tmp_path, monkeypatch,
                                                                          capsys):
    """What train.py, eval_glue.py, eval_squad.py do first (training/cli.py): none compiles
    without the cache, even where the environment names a folder; a later enable() in the
    same process (after programs were compiled uncached) writes there from its next
    compile on. In this process, not a train.py (the run above holds the flag's wiring)."""
    import jax
    import jax.numpy as jnp
    import ml_collections

    from common import compile_cache
    from training import cli

    session = (jax.config.jax_compilation_cache_dir
               if jax.config.jax_enable_compilation_cache else None)
    env_cache = tmp_path / "env_cache"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(env_cache))

    def compile_a_new_program(salt: float) -> None:
        jax.jit(lambda x: x * salt + 1.0).lower(jnp.ones(3)).compile()

    try:
        assert cli.enable_compile_cache(ml_collections.ConfigDict({"jax_cache": "none"})) is None
        assert "compilation cache: off" in capsys.readouterr().out
        compile_a_new_program(0.25)
        assert not env_cache.exists() or files_under(str(env_cache)) == set()
        assert cli.enable_compile_cache(
            ml_collections.ConfigDict({"jax_cache": "auto"})) == str(env_cache)
        compile_a_new_program(0.5)
        assert files_under(str(env_cache))
    finally:
        compile_cache.enable(session or "none")  # the session's cache, as it was
