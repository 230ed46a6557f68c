"""Talking-heads attention (Shazeer et al. 2020, arXiv 2003.02436).

Einsum letters: B batch, T query length, S key length, C query chunk length,
N query/key heads (h_k), H softmax heads (h), G value heads (h_v), K key size,
V value size.

Following Mesh TensorFlow's `TalkingHeadsSelfAttention` (the reference):
  J = Q.K                      (B, N, T, S)   h_k logit heads
  L = J @ P_l[N, H]            (B, H, T, S)   pre-softmax mixing
  L = L + mask                                the mask is added after P_l
  W = softmax_S(L)
  U = W @ P_w[H, G]            (B, G, T, S)   post-softmax mixing
  U = dropout(U)                              dropout after P_w, as the reference
  O = U.V                      (B, T, G, V)
P_l and P_w have no bias and start from a fan-in scaled normal; either can be
switched off (`projections`), initialised to the identity, or the mask moved
before P_l. Composes with any key_size/value_size.

Dropout hits the mixed weights U, as in both references (Mesh TF's
`attention_internal`, tf-models' `TalkingHeadsAttention._compute_attention`).
Its noise shape is a setting: `dropout_noise="elementwise"` (default) drops each
weight independently, as tf-models and BERT's multi-head attention do, so that
a talking-heads vs multi-head comparison differs only in the mixing;
"shared_queries" is Mesh TF's, one mask per (batch, head, key) for all queries.

Two paths give the same numbers: `full` materialises (B, H, T, S) for all
queries; `chunked` walks over query chunks with `jax.lax.map`, recomputing each
chunk in the backward pass (jax.checkpoint), so only (B, H, C, S) is live.
"""

from __future__ import annotations

import flax.linen as nn
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


def mixing_init(kind: str) -> nn.initializers.Initializer:
    def init(rng, shape, dtype=jnp.float32):
        if kind == "identity":
            return jnp.eye(shape[0], shape[1], dtype=dtype)
        # Reference: normal with stddev 1/sqrt(fan_in), fan_in = heads mixed from.
        return jax.random.normal(rng, shape, dtype) * shape[0] ** -0.5

    return nn.with_logical_partitioning(init, (None, None))


@register("talking_heads")
class TalkingHeadsAttention(Attention):
    def attend(self, query, key, value, mask, deterministic):
        cfg, th = self.config, self.config.talking_heads
        logit_heads, softmax_heads, value_heads = (
            cfg.num_logit_heads,
            cfg.num_heads,
            cfg.num_value_heads,
        )
        p_logits = (
            self.param("logits_mixing", mixing_init(th.init), (logit_heads, softmax_heads))
            if th.mix_logits
            else None
        )
        p_weights = (
            self.param("weights_mixing", mixing_init(th.init), (softmax_heads, value_heads))
            if th.mix_weights
            else None
        )
        dropout_rng = self.dropout_rng(deterministic)
        core = _Core(
            mask_before=th.mask_placement == "before",
            dropout_rate=cfg.attention_dropout_rate,
            broadcast_queries=th.dropout_noise == "shared_queries",
        )
        if th.impl == "chunked" and query.shape[1] > th.query_chunk_size:
            return core.chunked(
                query, key, value, mask, p_logits, p_weights, dropout_rng, th.query_chunk_size
            )
        return core(query, key, value, mask, p_logits, p_weights, dropout_rng)


class _Core:
    """The attention between projections, as a pure function of its inputs.

    Kept outside Flax so the chunked path can run it under lax.map/checkpoint.
    """

    def __init__(self, mask_before: bool, dropout_rate: float, broadcast_queries: bool):
        self.mask_before = mask_before
        self.dropout_rate = dropout_rate
        self.broadcast_queries = broadcast_queries

    def __call__(self, query, key, value, mask, p_logits, p_weights, dropout_rng):
        logits = dot_product_logits(query, key)  # (B, N, T, S)
        bias = padding_bias(mask)  # (B, 1, 1, S)
        if self.mask_before:
            logits = logits + bias
        if p_logits is not None:
            logits = jnp.einsum("BNTS,NH->BHTS", logits, p_logits.astype(jnp.float32))
        if self.mask_before:
            # A head mixture of masked logits can cancel or flip the bias, so the
            # padded keys are masked again; real keys are unaffected either way.
            logits = jnp.where(mask[:, None, None, :], logits, bias)
        else:
            logits = logits + bias
        weights = softmax_weights(logits)  # (B, H, T, S)
        if p_weights is not None:
            weights = jnp.einsum("BHTS,HG->BGTS", weights, p_weights.astype(jnp.float32))
        weights = dropout_weights(weights, self.dropout_rate, dropout_rng,
                                  self.broadcast_queries)
        return apply_weights(weights, value)  # (B, T, G, V)

    def chunked(self, query, key, value, mask, p_logits, p_weights, dropout_rng, chunk):
        batch, length = query.shape[:2]
        num_chunks = -(-length // chunk)
        padded = num_chunks * chunk
        if padded != length:
            query = jnp.pad(query, [(0, 0), (0, padded - length), (0, 0), (0, 0)])
        # (num_chunks, B, C, N, K): lax.map walks the leading axis.
        chunks = query.reshape(batch, num_chunks, chunk, *query.shape[2:]).swapaxes(0, 1)

        @jax.checkpoint
        def one_chunk(args):
            index, q = args
            # A mask shared by all queries must be the same in every chunk.
            rng = dropout_rng
            if dropout_rng is not None and not self.broadcast_queries:
                rng = jax.random.fold_in(dropout_rng, index)
            return self(q, key, value, mask, p_logits, p_weights, rng)  # (B, C, G, V)

        out = jax.lax.map(one_chunk, (jnp.arange(num_chunks), chunks))
        out = out.swapaxes(0, 1).reshape(batch, padded, *out.shape[3:])
        return out[:, :length]
