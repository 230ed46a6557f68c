"""Talking-heads attention (Shazeer et al. 2020, arXiv 2003.02436).

Einsum and shape letters: the one legend in attention/__init__.py.

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

Grouped mixing (`groups` R > 1, Mesh TF's shared head dimension): the heads fall
into R groups and each mixes only within its group, so P_l and P_w are block
diagonal, stored as their blocks (R, N/R, H/R) and (R, H/R, G/R) with the group axis
on the `heads` mesh axis: a tensor-parallel shard holds whole groups and mixes
without exchanging heads. R = 1 is the full mixing above (parameters (N, H), (H, G)
as before); R = N = H = G leaves one scalar per head, multi-head attention up to the
scale of each head's logits and weights.

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

import dataclasses
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from models.config import ModelConfig

# Allowed values of the settings chosen by name.
CHOICES = {
    "projections": ("both", "logits", "weights"),
    "mask_placement": ("after", "before"),
    "init": ("fan_in", "truncated_fan_in", "identity"),
    "impl": ("full", "chunked"),
    "dropout_noise": ("elementwise", "shared_queries"),
}


@dataclasses.dataclass(frozen=True)
class TalkingHeadsConfig:
    """model.talking_heads.*: this variant's own settings."""

    num_logit_heads: int | None = None  # h_k: query/key heads; None -> num_heads
    num_value_heads: int | None = None  # h_v: value heads; None -> num_heads
    projections: str = "both"  # both | logits | weights: which of P_l (pre-), P_w (post-softmax)
    mask_placement: str = "after"  # after | before P_l (Mesh TensorFlow reference: after)
    # fan_in: normal, stddev 1/sqrt(fan_in) (the default: every run and study so far used
    # it) | truncated_fan_in: the reference's own draw (Mesh TF's VarianceScalingInitializer
    # "normal" is a normal truncated at 2 stddev, so its spread is 0.88/sqrt(fan_in)) |
    # identity
    init: str = "fan_in"
    impl: str = "full"  # full | chunked (memory-efficient: query chunks, recomputed backward)
    query_chunk_size: int = 128  # queries per chunk for impl=chunked
    # Attention dropout (after P_w, as the references) draws: elementwise (tf-models, as
    # multi-head) | shared_queries (Mesh TF: one mask per batch, head and key).
    dropout_noise: str = "elementwise"
    groups: int = 1  # R: block-diagonal mixing within R groups of heads (1: full mixing)

    @property
    def mix_logits(self) -> bool:
        return self.projections in ("both", "logits")

    @property
    def mix_weights(self) -> bool:
        return self.projections in ("both", "weights")


# configs/model.py ARGS keys -> TalkingHeadsConfig fields.
SHORT_ARGS = {
    "th_logit_heads": "num_logit_heads", "th_value_heads": "num_value_heads",
    "th_projections": "projections", "th_mask": "mask_placement", "th_init": "init",
    "th_impl": "impl", "th_chunk": "query_chunk_size", "th_dropout_noise": "dropout_noise",
    "th_groups": "groups",
}


def mixing_init(kind: str, grouped: bool = False) -> nn.initializers.Initializer:
    """P[from, to], or grouped its blocks P[R, from, to]: fan_in = the heads mixed from."""
    def init(rng, shape, dtype=jnp.float32):
        if kind == "identity":
            return jnp.broadcast_to(jnp.eye(shape[-2], shape[-1], dtype=dtype), shape)
        if kind == "truncated_fan_in":  # within 2 stddev, not rescaled: as the reference
            return jax.random.truncated_normal(rng, -2.0, 2.0, shape, dtype) * shape[-2] ** -0.5
        return jax.random.normal(rng, shape, dtype) * shape[-2] ** -0.5

    # Grouped: the group axis is a head axis (tensor-parallel shards hold whole groups).
    return nn.with_logical_partitioning(init, ("heads", None, None) if grouped else (None, None))


def mix_heads(x: jax.Array, p: jax.Array) -> jax.Array:
    """(B, from heads, T, S) x P -> (B, to heads, T, S); P is (from, to) or its diagonal
    blocks (R, from/R, to/R), each group of heads mixing only within itself."""
    if p.ndim == 2:
        return jnp.einsum("BNTS,NH->BHTS", x, p)
    batch, heads, queries, keys = x.shape
    groups = p.shape[0]
    x = x.reshape(batch, groups, heads // groups, queries, keys)
    y = jnp.einsum("BRnTS,Rnh->BRhTS", x, p)
    return y.reshape(batch, groups * p.shape[2], queries, keys)


@register("talking_heads", settings=TalkingHeadsConfig, short_args=SHORT_ARGS,
          execution_fields=("impl", "query_chunk_size", "dropout_noise"))
class TalkingHeadsAttention(Attention):
    @classmethod
    def logit_heads(cls, config: ModelConfig) -> int:
        th = config.talking_heads
        return (th.num_logit_heads or config.num_heads) if th.mix_logits else config.num_heads

    @classmethod
    def value_heads(cls, config: ModelConfig) -> int:
        th = config.talking_heads
        return (th.num_value_heads or config.num_heads) if th.mix_weights else config.num_heads

    @classmethod
    def extra_flops_per_token(cls, config: ModelConfig, seq_len: int) -> float:
        """P_l and P_w mixing: 2 n (N H + H G) / R per token (R groups)."""
        th = config.talking_heads
        n_qk, h, g = cls.logit_heads(config), config.num_heads, cls.value_heads(config)
        return 2 * seq_len * ((n_qk * h if th.mix_logits else 0) + (h * g if th.mix_weights
                                                                     else 0)) / th.groups

    @classmethod
    def saved_score_bytes(cls, config: ModelConfig, element_bytes: int) -> float:
        """Multi-head's, plus the logits before P_l (its gradient reads them) and, without
        attention dropout, the weights after P_w (the weights x values matmul reads them;
        with dropout the dropped copy is already counted)."""
        th = config.talking_heads
        saved = super().saved_score_bytes(config, element_bytes)
        if th.mix_logits:
            saved += element_bytes * cls.logit_heads(config)
        if th.mix_weights and config.attention_dropout_rate == 0:
            saved += element_bytes * cls.value_heads(config)
        return saved

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        from models.config import ConfigError  # at call time: models imports attention

        th = config.talking_heads
        for name, allowed in CHOICES.items():
            if getattr(th, name) not in allowed:
                raise ConfigError(f"model.talking_heads.{name}={getattr(th, name)!r} is "
                                  f"unknown; choose one of {allowed}")
        for name in ("num_logit_heads", "num_value_heads", "query_chunk_size", "groups"):
            value = getattr(th, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ConfigError(
                    f"model.talking_heads.{name}={value!r} must be a positive integer")
        if config.attention != "talking_heads":
            return
        if th.num_logit_heads not in (None, config.num_heads) and not th.mix_logits:
            raise ConfigError(
                "model.talking_heads.num_logit_heads differs from num_heads but "
                f"projections={th.projections!r} has no logits projection to map between them")
        if th.num_value_heads not in (None, config.num_heads) and not th.mix_weights:
            raise ConfigError(
                "model.talking_heads.num_value_heads differs from num_heads but "
                f"projections={th.projections!r} has no weights projection to map between them")
        heads = (cls.logit_heads(config), config.num_heads, cls.value_heads(config))
        for name, count in zip(("num_logit_heads", "num_heads", "num_value_heads"), heads,
                               strict=True):
            if count % th.groups:
                raise ConfigError(
                    f"model.talking_heads.groups={th.groups} does not divide the "
                    f"{count} heads of {name}: each group mixes a share of every head kind")
        if th.init == "identity" and len(set(heads)) > 1:
            raise ConfigError(
                "model.talking_heads.init='identity' needs num_logit_heads == num_heads == "
                f"num_value_heads (got {heads[0]}, {heads[1]}, {heads[2]})")

    def attend(self, query, key, value, mask, deterministic, query_inputs, key_inputs):
        cfg, th = self.config, self.config.talking_heads
        logit_heads, softmax_heads, value_heads = (
            cfg.num_logit_heads,
            cfg.num_heads,
            cfg.num_value_heads,
        )
        def mixing(name: str, heads_from: int, heads_to: int):
            groups = th.groups
            shape = ((heads_from, heads_to) if groups == 1
                     else (groups, heads_from // groups, heads_to // groups))
            return self.param(name, mixing_init(th.init, groups > 1), shape)

        p_logits = mixing("logits_mixing", logit_heads, softmax_heads) if th.mix_logits else None
        p_weights = (mixing("weights_mixing", softmax_heads, value_heads) if th.mix_weights
                     else None)
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
            logits = mix_heads(logits, p_logits.astype(jnp.float32))
        if self.mask_before:
            # A head mixture of masked logits can cancel or flip the bias, so the
            # padded keys are masked again; real keys are unaffected either way.
            logits = jnp.where(mask[:, None, None, :], logits, bias)
        else:
            logits = logits + bias
        weights = softmax_weights(logits)  # (B, H, T, S)
        if p_weights is not None:
            weights = mix_heads(weights, p_weights.astype(jnp.float32))
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
