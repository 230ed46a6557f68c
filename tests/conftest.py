"""The tests' environment (CPU only, 8 fake devices, fp32 matmuls) and shared fixtures.

Builders (tiny configs, corpora, GLUE folders) are in helpers.py.
"""

from __future__ import annotations

import os
import shutil
import tempfile

# Sharding tests need several devices; the flag must be set before jax starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# The tests' models are tiny: compiling them, not running them, is most of the suite's
# time. Two flags cut it, and neither lets a float sum be reordered (no fast-math), so the
# code is slower but computes the same numbers up to rounding:
# - LLVM's optimisation passes off (the suite took about 40% less time);
# - XLA's CPU backend emits fusions with its older elemental emitters instead of its MLIR
#   fusion emitters: a tiny train step compiled in 1.0 s against 1.9 (and 5-6 s with
#   neither flag; scripts/compile_depth.py at layers=1, hidden 32, batch 16 x 32).
# The processes the tests start get them too (helpers.child_xla_flags).
for flag in ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"):
    if flag.split("=")[0] not in os.environ["XLA_FLAGS"]:
        os.environ["XLA_FLAGS"] += f" {flag}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One compilation cache for the session, shared by the workers and every train.py,
# eval_glue.py or script a test starts: the same tiny steps are compiled once, not in
# each process (a third off the subprocess tests). Set before jax starts; the
# variables pass on to child processes. A run's results do not depend on it.
_OWN_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _OWN_CACHE = tempfile.mkdtemp(prefix="bert-ablation-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"

import jax  # noqa: E402
import pytest  # noqa: E402
from helpers import write_official_glue_dir, write_run_corpus  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


def pytest_sessionfinish(session):
    """The process that made the cache removes it (xdist's workers inherit it)."""
    if _OWN_CACHE is not None and not hasattr(session.config, "workerinput"):
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


@pytest.fixture
def rng():
    return jax.random.key(42)


@pytest.fixture(scope="module")
def run_corpus(tmp_path_factory):
    """(corpus file, data cache dir) for tiny pretraining runs; one per test module."""
    directory = tmp_path_factory.mktemp("corpus")
    return write_run_corpus(str(directory)), str(directory / "cache")


@pytest.fixture(scope="module")
def official_glue_dir(tmp_path_factory):
    """A GLUE folder in the official layout (helpers.OFFICIAL_GLUE_FILES)."""
    return write_official_glue_dir(tmp_path_factory.mktemp("glue_data"))
