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

Dynamic projections (`dynamic_projections`, a "+"-joined subset of x2l, m2l, x2w, m2w
in this order, the reference's option of that name): P_l and P_w gain terms computed
from the hidden states, X_t at the query position and M_s at the key position, each a
bias-free dense map from D to a mixing matrix:
  L[t, s] = J[t, s] @ (P_l + X_t W_x2l) + J[t, s] @ (M_s W_m2l)
  U[t, s] = W[t, s] @ (P_w + X_t W_x2w) + W[t, s] @ (M_s W_m2w)
(the static matrix is folded into the first dynamic term, as the reference does, so a
side with one dynamic term costs one mixing, not two). W_* are (D, from, to), grouped
(D, R, from/R, to/R), drawn with variance `dynamic_init_scale` / (heads mixed from x D)
(the reference: 1e-2, "learning difficulties when this value is too large"), normal,
truncated at 2 stddev with init=truncated_fan_in. Both computation paths support them:
the query-side matrices are cut into chunks with the queries.

Dropout hits the mixed weights U, as in both references (Mesh TF's
`attention_internal`, tf-models' `TalkingHeadsAttention._compute_attention`).
`dropout_placement="before_mixing"` drops W before P_w instead (a slip this repository
once made, kept as a switch to measure it: a dropped weight then reaches every head the
mixing feeds). Its noise shape is a setting: `dropout_noise="elementwise"` (default) drops each
weight independently, as tf-models and BERT's multi-head attention do, so that
a talking-heads vs multi-head comparison differs only in the mixing;
"shared_queries" is Mesh TF's, one mask per (batch, head, key) for all queries.

Two paths give the same numbers: `full` materialises (B, H, T, S) for all
queries; `chunked` walks over query chunks with `jax.lax.map`, recomputing each
chunk in the backward pass (jax.checkpoint), so only (B, H, C, S) is live.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from attention import registry
from attention.base import (
    Attention,
    Insertion,
    apply_weights,
    dot_product_logits,
    dropout_weights,
    padding_bias,
    softmax_weights,
)
from attention.registry import register
from common.errors import ConfigError

if TYPE_CHECKING:
    from models.config import ModelConfig

# Allowed values of the settings chosen by name.
CHOICES = {
    "projections": ("both", "logits", "weights"),
    "mask_placement": ("after", "before"),
    "init": ("fan_in", "truncated_fan_in", "identity", "model_std"),
    "impl": ("full", "chunked"),
    "dropout_noise": ("elementwise", "shared_queries"),
    "dropout_placement": ("after_mixing", "before_mixing"),
}
# Dynamic projections: (from hidden states at, mixing side), in the reference's order.
DYNAMIC = {"x2l": ("queries", "logits"), "m2l": ("keys", "logits"),
           "x2w": ("queries", "weights"), "m2w": ("keys", "weights")}


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
    # identity | model_std: normal at the model's initializer_range (0.02 in BERT), what a
    # BERT codebase's blanket init of every dense weight (Hugging Face's _init_weights)
    # gives the mixing: at 48 heads 7x below fan-in, so both mixings start near zero
    init: str = "fan_in"
    impl: str = "full"  # full | chunked (memory-efficient: query chunks, recomputed backward)
    query_chunk_size: int = 128  # queries per chunk for impl=chunked
    # Attention dropout (after P_w, as the references) draws: elementwise (tf-models, as
    # multi-head) | shared_queries (Mesh TF: one mask per batch, head and key).
    dropout_noise: str = "elementwise"
    # Where attention dropout hits: after_mixing (on U = W P_w, as both references) |
    # before_mixing (on W, then mixed: this repository's own earlier defect, kept as a
    # switch to measure what the slip costs; each dropped weight then leaks into every head)
    dropout_placement: str = "after_mixing"
    groups: int = 1  # R: block-diagonal mixing within R groups of heads (1: full mixing)
    # Input-dependent mixing terms, "+"-joined in this order: x2l+m2l+x2w+m2w ("": none).
    # x: the hidden state at the query position, m: at the key position; l: P_l, w: P_w.
    dynamic_projections: str = ""
    dynamic_init_scale: float = 1e-2  # variance scale of the dynamic maps (the reference's)

    @property
    def dynamic(self) -> tuple[str, ...]:
        """The dynamic projections as a tuple, e.g. ('x2l', 'm2w')."""
        return tuple(self.dynamic_projections.split("+")) if self.dynamic_projections else ()

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
    "th_dropout_at": "dropout_placement",
    "th_groups": "groups", "th_dynamic": "dynamic_projections",
    "th_dynamic_scale": "dynamic_init_scale",
}


def _normal(kind: str, rng, shape, dtype, stddev):
    if kind == "truncated_fan_in":  # within 2 stddev, not rescaled: as the reference
        return jax.random.truncated_normal(rng, -2.0, 2.0, shape, dtype) * stddev
    return jax.random.normal(rng, shape, dtype) * stddev


def mixing_init(kind: str, grouped: bool = False, model_std: float = 0.02
                ) -> nn.initializers.Initializer:
    """P[from, to], or grouped its blocks P[R, from, to]: fan_in = the heads mixed from;
    model_std: the model's initializer_range, whatever the heads."""
    def init(rng, shape, dtype=jnp.float32):
        if kind == "identity":
            return jnp.broadcast_to(jnp.eye(shape[-2], shape[-1], dtype=dtype), shape)
        if kind == "model_std":
            return _normal(kind, rng, shape, dtype, model_std)
        return _normal(kind, rng, shape, dtype, shape[-2] ** -0.5)

    # Grouped: the group axis is a head axis (tensor-parallel shards hold whole groups).
    return nn.with_logical_partitioning(init, ("heads", None, None) if grouped else (None, None))


def dynamic_init(kind: str, scale: float, grouped: bool = False
                 ) -> nn.initializers.Initializer:
    """A dynamic map W[D, from, to] (grouped W[D, R, from, to]): variance scale / (heads
    mixed from x D), as the reference's VarianceScalingInitializer(scale / from) over
    the D inputs. The identity and model_std inits are the static matrix's; these stay
    the reference's draw."""
    def init(rng, shape, dtype=jnp.float32):
        stddev = (scale / (shape[-2] * shape[0])) ** 0.5
        own = kind if kind == "truncated_fan_in" else "fan_in"
        return _normal(own, rng, shape, dtype, stddev)

    axes = ("embed", "heads", None, None) if grouped else ("embed", None, None)
    return nn.with_logical_partitioning(init, axes)


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


@dataclasses.dataclass(frozen=True)
class Mixing:
    """One side's mixing (P_l or P_w), fp32: the static matrix (from, to) or its blocks
    (R, from/R, to/R), and the dynamic matrices per query position (B, T, ...) and per
    key position (B, S, ...), each (R, from/R, to/R) per position, or None."""

    static: jax.Array
    per_query: jax.Array | None = None
    per_key: jax.Array | None = None

    def __call__(self, x: jax.Array) -> jax.Array:
        """(B, from heads, T, S) -> (B, to heads, T, S)."""
        if self.per_query is None and self.per_key is None:
            return mix_heads(x, self.static)  # the static path, as without dynamic terms
        static = self.static if self.static.ndim == 3 else self.static[None]  # (R, n, h)
        batch, heads, queries, keys = x.shape
        groups, _, to = static.shape
        x = x.reshape(batch, groups, heads // groups, queries, keys)
        # The static matrix rides on the first dynamic term (one mixing, not two).
        if self.per_query is not None:
            y = jnp.einsum("BRnTS,BTRnh->BRhTS", x, self.per_query + static)
            if self.per_key is not None:
                y = y + jnp.einsum("BRnTS,BSRnh->BRhTS", x, self.per_key)
        else:
            y = jnp.einsum("BRnTS,BSRnh->BRhTS", x, self.per_key + static)
        return y.reshape(batch, groups * to, queries, keys)


@register("talking_heads", settings=TalkingHeadsConfig, short_args=SHORT_ARGS,
          execution_fields=("impl", "query_chunk_size", "dropout_noise"))
class TalkingHeadsAttention(Attention):
    # Fine-tune a multi-head checkpoint as talking heads (finetuning/pretrained.py).
    insertion = Insertion(
        flag="insert_talking_heads", init_field="insert_th_init", inits=CHOICES["init"],
        default_init="identity",
        short_args={"insert_th": "insert_talking_heads", "insert_th_init": "insert_th_init"},
        help="P_l and P_w are added to every layer of a multi-head checkpoint. "
             "insert_th_init: identity (the checkpoint's function at step 0; the mixing is "
             "then learned with the rest) | fan_in (N(0, 1/heads) per entry, drawn per "
             "fine-tuning seed: what swapping the talking-heads class into a trained model "
             "gives) | truncated_fan_in (the reference's) | model_std (normal at the "
             "checkpoint's initializer_range, drawn per run).",
        new_parameters="mixing")

    @classmethod
    def inserted_config(cls, config: ModelConfig, source: str, init: str) -> ModelConfig:
        """The multi-head checkpoint's architecture as talking heads (what a table costs
        such a row at, not its checkpoint's)."""
        if config.attention != "multi_head":
            raise ValueError(f"insert_talking_heads needs a multi_head checkpoint; {source} "
                             f"is {config.attention}")
        # Every architecture setting at its default (a multi-head config may carry talking
        # heads settings it never used: dynamic maps would start random), the execution
        # ones (impl, chunk size, dropout noise) as the config has them.
        current = config.talking_heads
        execution = registry.variant("talking_heads").execution_fields
        settings = type(current)(init=init, **{name: getattr(current, name)
                                               for name in execution})
        return config.replace(attention="talking_heads", talking_heads=settings)

    @classmethod
    def inserted_layer_params(cls, attention_params, config: ModelConfig,
                              stacked_layers: int | None):
        """init=identity: P_l = P_w = I, which changes neither the logits nor the weights,
        so the new model computes exactly the checkpoint's function (tests/test_eval_glue.py
        checks it). fan_in (or truncated_fan_in): None, each run draws the mixing."""
        if config.talking_heads.init != "identity":
            return None
        eye = np.eye(config.num_heads, dtype=np.float32)
        if stacked_layers is not None:  # scanned layers: one identity per layer, stacked
            eye = np.broadcast_to(eye, (stacked_layers, *eye.shape)).copy()
        return {**attention_params, "logits_mixing": eye, "weights_mixing": eye}

    @classmethod
    def logit_heads(cls, config: ModelConfig) -> int:
        th = config.talking_heads
        return (th.num_logit_heads or config.num_heads) if th.mix_logits else config.num_heads

    @classmethod
    def value_heads(cls, config: ModelConfig) -> int:
        th = config.talking_heads
        return (th.num_value_heads or config.num_heads) if th.mix_weights else config.num_heads

    @classmethod
    def label(cls, config: ModelConfig) -> str:
        """'talking_heads', with its init when not fan_in, its groups and its dynamic
        projections, e.g. 'talking_heads (identity mixing, dynamic x2l+m2w)'."""
        th = config.talking_heads
        parts = ([f"{th.init} mixing"] if th.init != "fan_in" else []) + (
            ["dropout before mixing"] if th.dropout_placement == "before_mixing" else []) + (
            [f"{th.groups} groups"] if th.groups > 1 else []) + (
            [f"dynamic {th.dynamic_projections}"] if th.dynamic else [])
        return f"{config.attention} ({', '.join(parts)})" if parts else config.attention

    @classmethod
    def _mixing_sides(cls, config: ModelConfig) -> dict[str, int]:
        """{'logits': N H / R, 'weights': H G / R}: the entries of each mixing matrix
        there is (the blocks' entries when grouped)."""
        th = config.talking_heads
        n_qk, h, g = cls.logit_heads(config), config.num_heads, cls.value_heads(config)
        sides = {"logits": n_qk * h if th.mix_logits else 0,
                 "weights": h * g if th.mix_weights else 0}
        return {side: entries // th.groups for side, entries in sides.items() if entries}

    @classmethod
    def _dynamic_entries(cls, config: ModelConfig, position: str) -> int:
        """Entries of the dynamic matrices computed per token at `position` (queries or
        keys): each is one mixing matrix's entries."""
        sides = cls._mixing_sides(config)
        return sum(sides[side] for name, (at, side) in DYNAMIC.items()
                   if at == position and name in config.talking_heads.dynamic)

    @classmethod
    def extra_flops_per_token(cls, config: ModelConfig, seq_len: int) -> float:
        """P_l and P_w mixing: 2 n (N H + H G) / R per token (R groups); a side with
        dynamic terms from both the query and the key position mixes twice; each
        query-side dynamic map is a (D, its matrix) product per query token."""
        dynamic = config.talking_heads.dynamic
        mixing = 0
        for side, entries in cls._mixing_sides(config).items():
            both = f"x2{side[0]}" in dynamic and f"m2{side[0]}" in dynamic
            mixing += 2 * seq_len * entries * (2 if both else 1)
        return mixing + 2 * config.hidden_size * cls._dynamic_entries(config, "queries")

    @classmethod
    def extra_key_flops_per_token(cls, config: ModelConfig) -> float:
        """Each key-side dynamic map (m2l, m2w): a (D, its matrix) product per key token."""
        return 2 * config.hidden_size * cls._dynamic_entries(config, "keys")

    @classmethod
    def saved_bytes_per_token(cls, config: ModelConfig, element_bytes: int
                              ) -> tuple[float, float]:
        """The dynamic mixing matrices, per query and per key token: the mixing's gradient
        with respect to the scores reads them (fp32: the mixing runs in fp32)."""
        return (4 * cls._dynamic_entries(config, "queries"),
                4 * cls._dynamic_entries(config, "keys"))

    @classmethod
    def saved_score_bytes(cls, config: ModelConfig, element_bytes: int) -> float:
        """Multi-head's, plus the logits before P_l (its gradient reads them) and, without
        attention dropout or with dropout before P_w, the weights after P_w (the weights x
        values matmul reads them; with dropout after P_w the dropped copy is already
        counted). Dropout before P_w drops W's H heads (mask and copy), not U's G."""
        th = config.talking_heads
        saved = super().saved_score_bytes(config, element_bytes)
        if th.mix_logits:
            saved += element_bytes * cls.logit_heads(config)
        dropout = config.attention_dropout_rate > 0
        if dropout and th.dropout_placement == "before_mixing":
            # The mask and the dropped copy are of W's H heads, not U's G (the base
            # counted G), and U = W_dropped P_w is kept for the weights x values matmul.
            heads, values = config.num_heads, cls.value_heads(config)
            saved += (1 + element_bytes) * (heads - values) + element_bytes * values
        elif th.mix_weights and not dropout:
            saved += element_bytes * cls.value_heads(config)
        return saved

    @classmethod
    def _check_dynamic(cls, config: ModelConfig) -> None:

        th = config.talking_heads
        given = th.dynamic_projections
        if not isinstance(given, str):
            raise ConfigError(f"model.talking_heads.dynamic_projections={given!r} must be a "
                              f"'+'-joined subset of {'+'.join(DYNAMIC)}, or ''")
        names = th.dynamic
        unknown = [n for n in names if n not in DYNAMIC]
        canonical = "+".join(n for n in DYNAMIC if n in names)
        if unknown or canonical != given:
            hint = f" (write {canonical!r})" if not unknown else ""
            raise ConfigError(
                f"model.talking_heads.dynamic_projections={given!r}: give a subset of "
                f"{', '.join(DYNAMIC)}, each once, '+'-joined in that order{hint}")
        scale = th.dynamic_init_scale
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not (
                math.isfinite(scale) and scale >= 0):
            raise ConfigError(f"model.talking_heads.dynamic_init_scale={scale!r} must be a "
                              f"finite number >= 0")
        if config.attention != "talking_heads":
            return
        for name in names:
            side = DYNAMIC[name][1]
            if not (th.mix_logits if side == "logits" else th.mix_weights):
                raise ConfigError(
                    f"model.talking_heads.dynamic_projections has {name}, a term of the "
                    f"{side} mixing, but projections={th.projections!r} has no {side} mixing")

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:

        th = config.talking_heads
        for name, allowed in CHOICES.items():
            if getattr(th, name) not in allowed:
                raise ConfigError(f"model.talking_heads.{name}={getattr(th, name)!r} is "
                                  f"unknown; choose one of {allowed}")
        for name in ("num_logit_heads", "num_value_heads", "query_chunk_size", "groups"):
            value = getattr(th, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value <= 0):
                raise ConfigError(
                    f"model.talking_heads.{name}={value!r} must be a positive integer")
        cls._check_dynamic(config)
        if config.attention != "talking_heads":
            return
        if th.dropout_placement == "before_mixing" and not th.mix_weights:
            raise ConfigError(
                "model.talking_heads.dropout_placement='before_mixing' needs the weights "
                f"mixing P_w, but projections={th.projections!r} has none")
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
        groups = th.groups
        inputs = {"queries": query_inputs, "keys": key_inputs}

        def block_shape(heads_from: int, heads_to: int) -> tuple[int, ...]:
            return ((heads_from, heads_to) if groups == 1
                    else (groups, heads_from // groups, heads_to // groups))

        def dynamic(name: str, heads_from: int, heads_to: int) -> jax.Array | None:
            """The matrices of one dynamic map (x2l: logits_mixing_from_queries, ...) at
            every position, (B, T or S, R, from/R, to/R) in fp32; None when it is off."""
            if name not in th.dynamic:
                return None
            at, side = DYNAMIC[name]
            kernel = self.param(f"{side}_mixing_from_{at}",
                                dynamic_init(th.init, th.dynamic_init_scale, groups > 1),
                                (cfg.hidden_size, *block_shape(heads_from, heads_to)))
            dtype = cfg.compute_dtype
            per_position = jnp.einsum("BTD,D...->BT...", inputs[at].astype(dtype),
                                      kernel.astype(dtype)).astype(jnp.float32)
            return per_position if groups > 1 else per_position[:, :, None]

        def mixing(side: str, heads_from: int, heads_to: int) -> Mixing:
            static = self.param(f"{side}_mixing",
                                mixing_init(th.init, groups > 1, cfg.initializer_range),
                                block_shape(heads_from, heads_to))
            return Mixing(static.astype(jnp.float32),
                          dynamic(f"x2{side[0]}", heads_from, heads_to),
                          dynamic(f"m2{side[0]}", heads_from, heads_to))

        mix_logits = (mixing("logits", cfg.num_logit_heads, cfg.num_heads) if th.mix_logits
                      else None)
        mix_weights = (mixing("weights", cfg.num_heads, cfg.num_value_heads) if th.mix_weights
                       else None)
        dropout_rng = self.dropout_rng(deterministic)
        core = _Core(
            mask_before=th.mask_placement == "before",
            dropout_rate=cfg.attention_dropout_rate,
            broadcast_queries=th.dropout_noise == "shared_queries",
            dropout_before_mixing=th.dropout_placement == "before_mixing",
        )
        if th.impl == "chunked" and query.shape[1] > th.query_chunk_size:
            return core.chunked(
                query, key, value, mask, mix_logits, mix_weights, dropout_rng,
                th.query_chunk_size)
        return core(query, key, value, mask, mix_logits, mix_weights, dropout_rng)


class _Core:
    """The attention between projections, as a pure function of its inputs.

    Kept outside Flax so the chunked path can run it under lax.map/checkpoint.
    """

    def __init__(self, mask_before: bool, dropout_rate: float, broadcast_queries: bool,
                 dropout_before_mixing: bool = False):
        self.mask_before = mask_before
        self.dropout_rate = dropout_rate
        self.broadcast_queries = broadcast_queries
        self.dropout_before_mixing = dropout_before_mixing

    def __call__(self, query, key, value, mask, mix_logits: Mixing | None,
                 mix_weights: Mixing | None, dropout_rng):
        logits = dot_product_logits(query, key)  # (B, N, T, S)
        bias = padding_bias(mask)  # (B, 1, 1, S)
        if self.mask_before:
            logits = logits + bias
        if mix_logits is not None:
            logits = mix_logits(logits)  # (B, H, T, S)
        if self.mask_before:
            # A head mixture of masked logits can cancel or flip the bias, so the
            # padded keys are masked again; real keys are unaffected either way.
            logits = jnp.where(mask[:, None, None, :], logits, bias)
        else:
            logits = logits + bias
        weights = softmax_weights(logits)  # (B, H, T, S)
        if self.dropout_before_mixing:  # the slip: W dropped, then mixed across heads
            weights = dropout_weights(weights, self.dropout_rate, dropout_rng,
                                      self.broadcast_queries)
        if mix_weights is not None:
            weights = mix_weights(weights)  # (B, G, T, S)
        if not self.dropout_before_mixing:
            weights = dropout_weights(weights, self.dropout_rate, dropout_rng,
                                      self.broadcast_queries)
        return apply_weights(weights, value)  # (B, T, G, V)

    def chunked(self, query, key, value, mask, mix_logits, mix_weights, dropout_rng, chunk):
        batch, length = query.shape[:2]
        num_chunks = -(-length // chunk)
        padded = num_chunks * chunk

        def split(x):
            """(B, T, ...) -> (num_chunks, B, C, ...): lax.map walks the leading axis."""
            if x is None:
                return None
            if padded != length:
                x = jnp.pad(x, [(0, 0), (0, padded - length)] + [(0, 0)] * (x.ndim - 2))
            return x.reshape(batch, num_chunks, chunk, *x.shape[2:]).swapaxes(0, 1)

        # The query-side dynamic matrices are cut into chunks with the queries.
        per_query = [split(m.per_query) if m is not None else None
                     for m in (mix_logits, mix_weights)]

        @jax.checkpoint
        def one_chunk(args):
            index, q, (logits_rows, weights_rows) = args
            # A mask shared by all queries must be the same in every chunk.
            rng = dropout_rng
            if dropout_rng is not None and not self.broadcast_queries:
                rng = jax.random.fold_in(dropout_rng, index)
            chunk_logits, chunk_weights = (
                None if m is None else dataclasses.replace(m, per_query=rows)
                for m, rows in ((mix_logits, logits_rows), (mix_weights, weights_rows)))
            return self(q, key, value, mask, chunk_logits, chunk_weights, rng)  # (B, C, G, V)

        out = jax.lax.map(one_chunk, (jnp.arange(num_chunks), split(query), per_query))
        out = out.swapaxes(0, 1).reshape(batch, padded, *out.shape[3:])
        return out[:, :length]
