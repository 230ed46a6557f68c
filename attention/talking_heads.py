"""Talking-heads attention (Shazeer et al. 2020, arXiv 2003.02436).

Einsum letters: B batch, T query length, S key length, C query chunk length,
N query/key heads (h_k), H softmax heads (h), G value heads (h_v), K key size,
V value size.

Following Mesh TensorFlow's `TalkingHeadsSelfAttention` (the reference):
  J = Q.K                      (B, N, T, S)   h_k logit heads
  L = J @ P_l[N, H]            (B, H, T, S)   pre-softmax mixing
  L = L + mask                                the mask is added after P_l
  W = softmax_S(L), dropout
  U = W @ P_w[H, G]            (B, G, T, S)   post-softmax mixing
  O = U.V                      (B, T, G, V)
P_l and P_w have no bias and start from a fan-in scaled normal; either can be
switched off (`projections`), initialised to the identity, or the mask moved
before P_l. Composes with any key_size/value_size.

Two paths give the same numbers: `full` materialises (B, H, T, S) for all
queries; `chunked` walks over query chunks with `jax.lax.map`, recomputing each
chunk in the backward pass (jax.checkpoint), so only (B, H, C, S) is live.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from attention.base import Attention, padding_bias
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
        dropout_rng = None
        if not deterministic and cfg.attention_dropout_rate > 0:
            dropout_rng = self.make_rng("dropout")
        core = _Core(
            mask_before=th.mask_placement == "before",
            dropout_rate=0.0 if deterministic else cfg.attention_dropout_rate,
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

    def __init__(self, mask_before: bool, dropout_rate: float):
        self.mask_before = mask_before
        self.dropout_rate = dropout_rate

    def __call__(self, query, key, value, mask, p_logits, p_weights, dropout_rng):
        scale = query.shape[-1] ** -0.5
        logits = jnp.einsum("BTNK,BSNK->BNTS", query * jnp.asarray(scale, query.dtype), key)
        logits = logits.astype(jnp.float32)
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
        weights = jax.nn.softmax(logits, axis=-1)  # (B, H, T, S)
        if dropout_rng is not None and self.dropout_rate > 0:
            keep = jax.random.bernoulli(dropout_rng, 1.0 - self.dropout_rate, weights.shape)
            weights = jnp.where(keep, weights / (1.0 - self.dropout_rate), 0.0)
        if p_weights is not None:
            weights = jnp.einsum("BHTS,HG->BGTS", weights, p_weights.astype(jnp.float32))
        return jnp.einsum("BGTS,BSGV->BTGV", weights.astype(value.dtype), value)

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
            rng = None if dropout_rng is None else jax.random.fold_in(dropout_rng, index)
            return self(q, key, value, mask, p_logits, p_weights, rng)  # (B, C, G, V)

        out = jax.lax.map(one_chunk, (jnp.arange(num_chunks), chunks))
        out = out.swapaxes(0, 1).reshape(batch, padded, *out.shape[3:])
        return out[:, :length]
