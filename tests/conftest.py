"""The tests' environment (CPU only, 8 fake devices, fp32 matmuls) and shared fixtures.

Builders (tiny configs, corpora, GLUE folders) are in helpers.py.
"""

from __future__ import annotations

import os

# Sharding tests need several devices; the flag must be set before jax starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402
from helpers import write_official_glue_dir, write_run_corpus  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


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
