"""General bilinear attention (Mesh TensorFlow's `GeneralBilinearSelfAttention`, "described
in the forthcoming talking-heads paper"; Shazeer et al. 2020's general bilinear
multi-head attention).

Einsum and shape letters: the one legend in attention/__init__.py (here H heads, each
with a D-wide query, N = H = G and K = V = D).

Each head scores a query position against a key position with a full bilinear form of
their hidden states, x_t^T A_h m_s, and reads the hidden states themselves as values
through a full output map of its own:
  Q = X W_q + b_q              (B, T, H, D)   a D-wide query per head
  L = Q . M / sqrt(D) + mask   (B, H, T, S)   the keys are the hidden states M
  W = dropout(softmax_S(L))
  U = W . M                    (B, T, H, D)   so are the values
  Y = U W_o + b_o              (B, T, D)
This is multi-head attention with key and value size D whose key and value maps are the
identity: a key map K_h would only multiply into the query's (A_h = W_q,h K_h^T) and a
value map into the output's, so the reference leaves both out. Parameters per layer
2 H D^2 + H D + D (multi-head: 4 D^2 + 4 D at any H); the rank of each head's bilinear
form is D, not D / H, which is the low-rank paper's bottleneck removed outright.

Conventions as the other variants here, not Mesh TF's: BERT's projections have biases
and a truncated-normal init of stddev initializer_range, and the logits are scaled by
1/sqrt(key size) (Mesh TF has no biases and folds that scale into W_q's init). Dropout
hits the weights; `dropout_noise` draws it per weight (default, as BERT's multi-head) or
once per (batch, head, key) for all queries (Mesh TF's noise shape).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import flax.linen as nn
import jax.numpy as jnp

from attention.base import Attention, dropout_weights, padding_bias, softmax_weights
from attention.registry import register
from common.errors import ConfigError

if TYPE_CHECKING:
    from models.config import ModelConfig

DROPOUT_NOISE = ("elementwise", "shared_queries")


@dataclasses.dataclass(frozen=True)
class GeneralBilinearConfig:
    """model.general_bilinear.*: this variant's own settings."""

    # Attention dropout draws: elementwise (as multi-head) | shared_queries (Mesh TF: one
    # mask per batch, head and key for every query).
    dropout_noise: str = "elementwise"


@register("general_bilinear", settings=GeneralBilinearConfig,
          short_args={"gb_dropout_noise": "dropout_noise"},
          execution_fields=("dropout_noise",))
class GeneralBilinearAttention(Attention):
    @classmethod
    def key_size(cls, config: ModelConfig) -> int:
        return config.hidden_size  # the keys are the hidden states

    @classmethod
    def value_size(cls, config: ModelConfig) -> int:
        return config.hidden_size  # and so are the values

    @classmethod
    def projected_widths(cls, config: ModelConfig) -> tuple[int, int, int]:
        """A D-wide query per head; no key or value projection."""
        return config.num_heads * config.hidden_size, 0, 0

    @classmethod
    def check_head_sizes(cls, config: ModelConfig) -> None:
        """Any head count works (nothing is split D / H); key and value sizes are D."""

        for name in ("key_size", "value_size"):
            size = getattr(config, name)
            if size is not None and size != config.hidden_size:
                raise ConfigError(
                    f"model.{name}={size}: general_bilinear attention's keys and values are "
                    f"the hidden states (width hidden_size={config.hidden_size}); leave "
                    f"{name} unset")

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:

        noise = config.general_bilinear.dropout_noise
        if noise not in DROPOUT_NOISE:
            raise ConfigError(f"model.general_bilinear.dropout_noise={noise!r} is unknown; "
                              f"choose one of {DROPOUT_NOISE}")

    def heads(self, queries_from, x, mask, deterministic):
        cfg = self.config
        width = cfg.hidden_size
        query = self.project(queries_from, "query", cfg.num_heads, width)  # (B, T, H, D)
        memory = nn.with_logical_constraint(x.astype(cfg.compute_dtype),
                                            ("batch", "length", "embed"))  # (B, S, D)
        scale = jnp.asarray(width ** -0.5, query.dtype)
        logits = jnp.einsum("BTHD,BSD->BHTS", query * scale, memory).astype(jnp.float32)
        weights = softmax_weights(logits + padding_bias(mask))  # (B, H, T, S)
        weights = dropout_weights(
            weights, cfg.attention_dropout_rate, self.dropout_rng(deterministic),
            broadcast_queries=cfg.general_bilinear.dropout_noise == "shared_queries")
        return jnp.einsum("BHTS,BSD->BTHD", weights.astype(memory.dtype), memory)
