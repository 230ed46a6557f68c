"""BERT's multi-head attention with per-head key size and value size.

Einsum and shape letters: the one legend in attention/__init__.py.

key_size = value_size = D/N is BERT exactly; raising only key_size is the
low-rank paper's "large key size"; key_size = value_size = d_p is its "fixed
head size" layer. Two computation paths give the same numbers:
  einsum  the reference, written out step by step (supports attention dropout);
  fused   jax.nn.dot_product_attention (cuDNN flash attention on GPU), no dropout.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from attention.base import (
    Attention,
    apply_weights,
    dot_product_logits,
    dropout_weights,
    padding_bias,
    softmax_weights,
)
from attention.registry import register


@register("multi_head")
class MultiHeadAttention(Attention):
    def attend(self, query, key, value, mask, deterministic, query_inputs, key_inputs):
        if self.config.attention_impl == "fused":
            return fused_attention(query, key, value, mask)
        logits = dot_product_logits(query, key) + padding_bias(mask)  # (B, N, T, S)
        weights = dropout_weights(softmax_weights(logits), self.config.attention_dropout_rate,
                                  self.dropout_rng(deterministic))
        return apply_weights(weights, value)  # (B, T, N, V)

    @classmethod
    def has_fused_path(cls, config):
        # fused_attention below, for any key and value size. A subclass with an attend
        # of its own computes something else: it has a fused path only if it says so.
        return cls.attend is MultiHeadAttention.attend


def fused_attention(query, key, value, mask):
    """jax.nn.dot_product_attention, which needs one width for keys and values.

    When key size K and value size V differ, the narrower side is zero-padded:
    zero columns add nothing to q.k, and padded value columns are sliced off, so
    the result is exact. The scale stays 1/sqrt(K).
    """
    key_size, value_size = query.shape[-1], value.shape[-1]
    width = max(key_size, value_size)

    def pad(x):
        extra = width - x.shape[-1]
        return x if extra == 0 else jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, extra)])

    out = jax.nn.dot_product_attention(
        pad(query),
        pad(key),
        pad(value),
        mask=mask[:, None, None, :],
        scale=key_size**-0.5,
    )
    return out[..., :value_size]
