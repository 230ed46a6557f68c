"""The frozen model config: the one place a ConfigDict becomes typed and validated.

Every check here raises `ConfigError` with one line naming the field, so a bad
combination fails before anything is traced or compiled.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

ATTENTION_IMPLS = ("einsum", "fused")
NORM_PLACEMENTS = ("post", "pre")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
REMAT_POLICIES = ("none", "full", "dots")
TH_PROJECTIONS = ("both", "logits", "weights")
TH_MASK_PLACEMENTS = ("after", "before")
TH_INITS = ("fan_in", "identity")
TH_IMPLS = ("full", "chunked")
TH_DROPOUT_NOISE = ("elementwise", "shared_queries")
# Fields that change how the model is computed, not its parameters: a checkpoint
# saved with other values of these restores and continues.
EXECUTION_FIELDS = ("dropout_rate", "attention_dropout_rate", "dtype", "remat",
                    "attention_impl", "sparse_final_layer", "size", "talking_heads.impl",
                    "talking_heads.query_chunk_size", "talking_heads.dropout_noise")


class ConfigError(ValueError):
    """A config value or combination that cannot work; the message names the field."""


@dataclasses.dataclass(frozen=True)
class TalkingHeadsConfig:
    num_logit_heads: int | None = None  # h_k: query/key heads; None -> num_heads
    num_value_heads: int | None = None  # h_v: value heads; None -> num_heads
    projections: str = "both"  # both | logits (P_l only) | weights (P_w only)
    mask_placement: str = "after"  # after | before P_l
    init: str = "fan_in"  # fan_in | identity
    impl: str = "full"  # full | chunked
    query_chunk_size: int = 128
    dropout_noise: str = "elementwise"  # elementwise | shared_queries (Mesh TF's noise shape)

    @property
    def mix_logits(self) -> bool:
        return self.projections in ("both", "logits")

    @property
    def mix_weights(self) -> bool:
        return self.projections in ("both", "weights")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 30522
    num_layers: int = 12
    hidden_size: int = 768
    num_heads: int = 12
    key_size: int | None = None
    value_size: int | None = None
    mlp_dim: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    attention: str = "multi_head"
    attention_impl: str = "einsum"
    norm_placement: str = "post"
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    dtype: str = "float32"
    remat: str = "none"
    # Compute the last encoder layer only where the loss reads it (see models/layers.py).
    sparse_final_layer: bool = False
    size: str = "custom"
    talking_heads: TalkingHeadsConfig = dataclasses.field(default_factory=TalkingHeadsConfig)

    def __post_init__(self) -> None:
        self.validate()

    # -- derived sizes -------------------------------------------------------
    @property
    def head_key_size(self) -> int:
        """Per-head query/key width K (the low-rank paper's knob)."""
        return self.key_size if self.key_size is not None else self.hidden_size // self.num_heads

    @property
    def head_value_size(self) -> int:
        """Per-head value width V."""
        if self.value_size is not None:
            return self.value_size
        return self.hidden_size // self.num_heads

    @property
    def num_logit_heads(self) -> int:
        """Heads that produce logits: h_k for talking heads, N otherwise."""
        if self.attention == "talking_heads" and self.talking_heads.mix_logits:
            return self.talking_heads.num_logit_heads or self.num_heads
        return self.num_heads

    @property
    def num_value_heads(self) -> int:
        """Heads that carry values: h_v for talking heads, N otherwise."""
        if self.attention == "talking_heads" and self.talking_heads.mix_weights:
            return self.talking_heads.num_value_heads or self.num_heads
        return self.num_heads

    @property
    def compute_dtype(self) -> Any:
        return DTYPES[self.dtype]

    # -- construction --------------------------------------------------------
    @classmethod
    def from_config(cls, model: Any) -> ModelConfig:
        """Builds from a ConfigDict (or mapping) holding the fields above."""
        raw = dict(model.to_dict() if hasattr(model, "to_dict") else model)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"model: unknown field(s) {unknown}; known: {sorted(known)}")
        th_raw = dict(raw.pop("talking_heads", None) or {})
        th_known = {f.name for f in dataclasses.fields(TalkingHeadsConfig)}
        th_unknown = sorted(set(th_raw) - th_known)
        if th_unknown:
            raise ConfigError(
                f"model.talking_heads: unknown field(s) {th_unknown}; known: {sorted(th_known)}"
            )
        return cls(**raw, talking_heads=TalkingHeadsConfig(**th_raw))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    # -- validation ----------------------------------------------------------
    def validate(self) -> None:
        from attention import registry  # the registry is the list of valid names

        def positive(name: str, value: Any) -> None:
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"model.{name}={value!r} must be a positive integer")

        for name in ("vocab_size", "num_layers", "hidden_size", "num_heads", "mlp_dim",
                     "max_position_embeddings", "type_vocab_size"):
            positive(name, getattr(self, name))
        for name in ("key_size", "value_size"):
            if getattr(self, name) is not None:
                positive(name, getattr(self, name))
        if (self.key_size is None or self.value_size is None) and (
            self.hidden_size % self.num_heads
        ):
            unset = "key_size" if self.key_size is None else "value_size"
            raise ConfigError(
                f"model.num_heads={self.num_heads} does not divide "
                f"model.hidden_size={self.hidden_size}; set model.{unset} explicitly"
            )
        if self.attention not in registry.names():
            raise ConfigError(
                f"model.attention={self.attention!r} is unknown; choose one of {registry.names()}"
            )
        choices = {
            "attention_impl": ATTENTION_IMPLS,
            "norm_placement": NORM_PLACEMENTS,
            "dtype": tuple(DTYPES),
            "remat": REMAT_POLICIES,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"model.{name}={getattr(self, name)!r} is unknown; choose one of {allowed}"
                )
        for name in ("dropout_rate", "attention_dropout_rate"):
            rate = getattr(self, name)
            if not 0.0 <= rate < 1.0:
                raise ConfigError(f"model.{name}={rate!r} must be in [0, 1)")
        if self.attention_impl == "fused" and self.attention_dropout_rate > 0:
            raise ConfigError(
                "model.attention_impl='fused' has no attention dropout "
                f"(jax.nn.dot_product_attention); set model.attention_dropout_rate=0 "
                f"(it is {self.attention_dropout_rate})"
            )
        if self.attention_impl == "fused" and self.attention != "multi_head":
            raise ConfigError(
                f"model.attention_impl='fused' exists for multi_head only, not "
                f"{self.attention!r}: heads are mixed between logits and softmax"
            )
        self._validate_talking_heads()

    def _validate_talking_heads(self) -> None:
        th = self.talking_heads
        choices = {
            "projections": TH_PROJECTIONS,
            "mask_placement": TH_MASK_PLACEMENTS,
            "init": TH_INITS,
            "impl": TH_IMPLS,
            "dropout_noise": TH_DROPOUT_NOISE,
        }
        for name, allowed in choices.items():
            if getattr(th, name) not in allowed:
                raise ConfigError(
                    f"model.talking_heads.{name}={getattr(th, name)!r} is unknown; "
                    f"choose one of {allowed}"
                )
        for name in ("num_logit_heads", "num_value_heads", "query_chunk_size"):
            value = getattr(th, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ConfigError(
                    f"model.talking_heads.{name}={value!r} must be a positive integer"
                )
        if self.attention != "talking_heads":
            return
        if th.num_logit_heads not in (None, self.num_heads) and not th.mix_logits:
            raise ConfigError(
                "model.talking_heads.num_logit_heads differs from num_heads but "
                f"projections={th.projections!r} has no logits projection to map between them"
            )
        if th.num_value_heads not in (None, self.num_heads) and not th.mix_weights:
            raise ConfigError(
                "model.talking_heads.num_value_heads differs from num_heads but "
                f"projections={th.projections!r} has no weights projection to map between them"
            )
        if th.init == "identity" and (
            self.num_logit_heads != self.num_heads or self.num_value_heads != self.num_heads
        ):
            raise ConfigError(
                "model.talking_heads.init='identity' needs num_logit_heads == num_heads == "
                f"num_value_heads (got {self.num_logit_heads}, {self.num_heads}, "
                f"{self.num_value_heads})"
            )
