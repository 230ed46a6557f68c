"""Shared helpers for the tests: tiny configs and batches, CPU only."""

from __future__ import annotations

import os

# Sharding tests need several devices; the flag must be set before jax starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402

from models import ModelConfig, TalkingHeadsConfig  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


def tiny_config(**overrides) -> ModelConfig:
    """A 2-layer, width-32 BERT; talking_heads fields go in `talking_heads=dict(...)`."""
    fields = dict(
        vocab_size=97, num_layers=2, hidden_size=32, num_heads=4, mlp_dim=64,
        max_position_embeddings=64, dropout_rate=0.0, attention_dropout_rate=0.0,
        size="test", sparse_final_layer=False,  # dense unless a test asks
    )
    th = overrides.pop("talking_heads", {})
    fields.update(overrides)
    return ModelConfig(**fields, talking_heads=TalkingHeadsConfig(**th))


def random_batch(key, batch=3, length=12, vocab=97, pad_from=None):
    ids = jax.random.randint(key, (batch, length), 1, vocab)
    mask = jnp.ones((batch, length), jnp.int32)
    if pad_from is not None:
        mask = mask.at[:, pad_from:].set(0)
    return ids, jnp.zeros_like(ids), mask


def init_params(module, *args, seed=0):
    variables = module.init(jax.random.key(seed), *args)
    return nn.unbox(variables)["params"]


@pytest.fixture
def rng():
    return jax.random.key(42)
