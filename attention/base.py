"""The attention interface and the steps every variant shares.

Einsum and shape letters: the one legend in attention/__init__.py.

`Attention.__call__(x, mask, deterministic)` takes hidden states [B, T, D] and a
padding mask [B, S] (True = real token) and returns [B, T, D]; with `queries_from`
[B, P, D] it attends from those P rows only (models/layers.py's sparse final layer).
The shared steps live here once: the q/k/v and output projections as methods, and
logits, softmax, dropout and weights x values as pure functions (flaxformer's split
into "weights from logits" and "weights applied to values"). A variant overrides
`attend`, the part between the projections, and calls the steps it needs in its
own order (talking heads mixes heads between them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from attention.initializers import kernel_init, zeros_init
from common.errors import ConfigError

if TYPE_CHECKING:
    from models.config import ModelConfig

Array = jax.Array

# Added to the logits of padded keys. Large enough that exp() underflows to 0 in
# fp32, small enough that adding it to a logit cannot overflow to -inf.
MASK_VALUE = -1e9


def padding_bias(mask: Array) -> Array:
    """[B, S] bool -> additive bias [B, 1, 1, S] (0 for real keys)."""
    return jnp.where(mask[:, None, None, :], 0.0, MASK_VALUE).astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class Insertion:
    """How a fine-tuning turns a trained multi-head encoder into a variant
    (finetuning/pretrained.py): the fine-tuning config's fields that ask for it
    (configs/finetune.py adds them) and the inits its new parameters may start from."""

    flag: str  # the bool field, e.g. insert_talking_heads
    init_field: str  # the init's field, e.g. insert_th_init
    inits: tuple[str, ...]
    default_init: str
    short_args: Mapping[str, str] = dataclasses.field(default_factory=dict)  # arg -> field
    help: str = ""  # the config's comment
    new_parameters: str = "parameters"  # what a run's source calls them ("with fan_in mixing")


class Attention(nn.Module):
    """Multi-head attention skeleton; variants override `attend`."""

    config: ModelConfig
    # None: the variant cannot be inserted into a trained multi-head encoder.
    insertion: ClassVar[Insertion | None] = None

    @nn.compact
    def __call__(
        self, x: Array, mask: Array, deterministic: bool = True, queries_from: Array | None = None
    ) -> Array:
        """`queries_from` [B, P, D] (default: x) gives the query rows; keys and values
        always come from all of x. The output has one row per query: [B, P, D]."""
        cfg = self.config
        queries_from = x if queries_from is None else queries_from
        mixed = self.heads(queries_from, x, mask, deterministic)  # (B, T, G, V)
        mixed = nn.with_logical_constraint(mixed, ("batch", "length", "heads", "kv"))
        out = nn.DenseGeneral(
            features=cfg.hidden_size,
            axis=(-2, -1),
            dtype=cfg.compute_dtype,
            kernel_init=kernel_init(cfg, ("heads", "kv", "embed")),
            bias_init=zeros_init(("embed",)),
            name="out",
        )(mixed)
        return nn.with_logical_constraint(out, ("batch", "length", "embed"))

    def heads(self, queries_from: Array, x: Array, mask: Array, deterministic: bool) -> Array:
        """Every head's output before the output projection, (B, T, G, V): the query,
        key and value projections, then `attend`. A variant whose keys or values are not
        projections of x overrides this (general bilinear attention)."""
        cfg = self.config
        query = self.project(queries_from, "query", cfg.num_logit_heads, cfg.head_key_size)
        key = self.project(x, "key", cfg.num_logit_heads, cfg.head_key_size)  # (B, S, N, K)
        value = self.project(x, "value", cfg.num_value_heads, cfg.head_value_size)  # (B, S, G, V)
        return self.attend(query, key, value, mask, deterministic,
                           query_inputs=queries_from, key_inputs=x)

    def attend(
        self, query: Array, key: Array, value: Array, mask: Array, deterministic: bool,
        query_inputs: Array, key_inputs: Array,
    ) -> Array:
        """(B, T, N, K), (B, S, N, K), (B, S, G, V) -> (B, T, G, V). `query_inputs`
        (B, T, D) and `key_inputs` (B, S, D) are the hidden states the projections read
        (talking heads' dynamic projections read them too)."""
        raise NotImplementedError

    # -- what the rest of the code asks a variant (classmethods: no module needed) --
    @classmethod
    def logit_heads(cls, config: ModelConfig) -> int:
        """Heads that produce logits (N): the query/key projections' head count."""
        return config.num_heads

    @classmethod
    def value_heads(cls, config: ModelConfig) -> int:
        """Heads that carry values (G): the value and output projections' head count."""
        return config.num_heads

    @classmethod
    def label(cls, config: ModelConfig) -> str:
        """The attention as tables and plots name it: the variant, and the settings that
        set its rows apart."""
        return config.attention

    @classmethod
    def key_size(cls, config: ModelConfig) -> int:
        """Per-head query/key width K: config.key_size; unset, D / N (the query/key heads
        share the width, as Mesh TensorFlow's talking heads do)."""
        if config.key_size is not None:
            return config.key_size
        return config.hidden_size // cls.logit_heads(config)

    @classmethod
    def value_size(cls, config: ModelConfig) -> int:
        """Per-head value width V: config.value_size; unset, D / G."""
        if config.value_size is not None:
            return config.value_size
        return config.hidden_size // cls.value_heads(config)

    @classmethod
    def projected_widths(cls, config: ModelConfig) -> tuple[int, int, int]:
        """Per-token output widths of the query, key and value projections (models/flops.py,
        models/memory.py); 0 where a variant has no such projection."""
        keys = cls.logit_heads(config) * config.head_key_size
        return keys, keys, cls.value_heads(config) * config.head_value_size

    @classmethod
    def check_head_sizes(cls, config: ModelConfig) -> None:
        """An unset key (value) size is D / N (D / G): those heads must divide D."""

        for unset, heads, field in (
                ("key_size", cls.logit_heads(config), "num_logit_heads"),
                ("value_size", cls.value_heads(config), "num_value_heads")):
            if getattr(config, unset) is not None or not isinstance(heads, int) or heads < 1 \
                    or config.hidden_size % heads == 0:
                continue  # a bad head count is the variant's check_config's error
            name = "num_heads" if heads == config.num_heads else f"{config.attention}.{field}"
            raise ConfigError(f"model.{name}={heads} does not divide model.hidden_size="
                              f"{config.hidden_size}; set model.{unset} explicitly")

    @classmethod
    def has_fused_path(cls, config: ModelConfig) -> bool:
        """True when the variant computes attention_impl='fused' (one
        jax.nn.dot_product_attention call); models/config.py refuses 'fused' otherwise."""
        return False

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        """Raises models.config.ConfigError, naming the field, for settings that cannot
        work with this variant (called when a ModelConfig is built, for the variant in
        use and for every variant with settings: check those whatever the attention)."""

    @classmethod
    def saved_score_bytes(cls, config: ModelConfig, element_bytes: int) -> float:
        """Bytes per (query, key) pair that the backward pass keeps of the (B, heads, T, T)
        tensors (models/memory.py): the softmax output, and with attention dropout its
        1-byte mask and the dropped weights (Korthikanti et al. 2022's 5 a s^2 b at 2-byte
        activations)."""
        heads, values = config.num_heads, cls.value_heads(config)
        dropout = (1 + element_bytes) * values if config.attention_dropout_rate > 0 else 0
        return element_bytes * heads + dropout

    @classmethod
    def saved_bytes_per_token(cls, config: ModelConfig, element_bytes: int
                              ) -> tuple[float, float]:
        """Bytes the backward pass keeps beyond the projections' inputs and outputs, per
        query token and per key token (models/memory.py), e.g. talking heads' dynamic
        mixing matrices."""
        return 0.0, 0.0

    @classmethod
    def extra_flops_per_token(cls, config: ModelConfig, seq_len: int) -> float:
        """Forward matmul FLOPs per query token beyond projections, logits and weights x
        values (models/flops.py), e.g. talking heads' mixing."""
        return 0.0

    @classmethod
    def extra_key_flops_per_token(cls, config: ModelConfig) -> float:
        """Forward matmul FLOPs per key token beyond the key and value projections: work
        on the keys' side that a sparse final layer still runs at every position."""
        return 0.0

    # -- fine-tuning a trained multi-head encoder as this variant (cls.insertion) ------
    @classmethod
    def inserted_config(cls, config: ModelConfig, source: str, init: str) -> ModelConfig:
        """The architecture a fine-tuning of `source` (a checkpoint of `config`) runs
        with this variant inserted, its new parameters starting from `init` (one of
        `insertion.inits`, checked before the call). A variant with `insertion` defines it."""
        raise ConfigError(f"{cls.__name__} defines no inserted_config: it cannot be inserted "
                          f"into a trained model")

    @classmethod
    def inserted_layer_params(cls, attention_params: dict[str, Any], config: ModelConfig,
                              stacked_layers: int | None) -> dict[str, Any] | None:
        """One layer's attention parameters with the variant's new ones added (config:
        the inserted architecture; stacked_layers: the scanned layout's layer count, whose
        arrays carry it as a leading axis); None: the new parameters are left out, so each
        fine-tuning run draws them with its fresh weights, from its own seed. A variant
        with `insertion` defines it (no default: an identity init left out would start
        random while the run says "at identity")."""
        raise ConfigError(f"{cls.__name__} defines no inserted_layer_params: it cannot be "
                          f"inserted into a trained model")

    # -- shared steps ----------------------------------------------------------
    def project(self, x: Array, name: str, heads: int, size: int) -> Array:
        """[B, T, D] -> [B, T, heads, size]."""
        cfg = self.config
        y = nn.DenseGeneral(
            features=(heads, size),
            dtype=cfg.compute_dtype,
            kernel_init=kernel_init(cfg, ("embed", "heads", "kv")),
            bias_init=zeros_init(("heads", "kv")),
            name=name,
        )(x)
        return nn.with_logical_constraint(y, ("batch", "length", "heads", "kv"))

    def dropout_rng(self, deterministic: bool) -> Array | None:
        """The key for attention dropout, or None when there is none to apply."""
        if deterministic or self.config.attention_dropout_rate == 0:
            return None
        return self.make_rng("dropout")


# -- the shared steps, as pure functions (the chunked talking-heads path runs them
# under lax.map and jax.checkpoint, outside Flax) --------------------------------------
def dot_product_logits(query: Array, key: Array) -> Array:
    """Scaled dot products per head, fp32: (B, T, N, K), (B, S, N, K) -> (B, N, T, S)."""
    scale = query.shape[-1] ** -0.5
    logits = jnp.einsum("BTNK,BSNK->BNTS", query * jnp.asarray(scale, query.dtype), key)
    return logits.astype(jnp.float32)


def softmax_weights(logits: Array) -> Array:
    """Softmax over keys in fp32: (B, N, T, S) -> (B, N, T, S)."""
    return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)


def dropout_weights(weights: Array, rate: float, rng: Array | None,
                    broadcast_queries: bool = False) -> Array:
    """Inverted dropout of attention weights (B, heads, T, S); identity when rng is None.

    broadcast_queries=True draws one mask per (batch, head, key) for every query,
    Mesh TensorFlow's noise shape; otherwise every weight is dropped independently.
    """
    if rng is None or rate == 0:
        return weights
    shape = list(weights.shape)
    if broadcast_queries:
        shape[2] = 1
    keep = jax.random.bernoulli(rng, 1.0 - rate, shape)
    return jnp.where(keep, weights / (1.0 - rate), 0.0).astype(weights.dtype)


def apply_weights(weights: Array, value: Array) -> Array:
    """(B, G, T, S), (B, S, G, V) -> (B, T, G, V) in the compute dtype."""
    return jnp.einsum("BGTS,BSGV->BTGV", weights.astype(value.dtype), value)
