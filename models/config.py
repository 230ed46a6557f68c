"""The frozen model config: the one place a ConfigDict becomes typed and validated.

Every check here raises `ConfigError` with one line naming the field, so a bad
combination fails before anything is traced or compiled.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from attention import registry
from common.errors import ConfigError

# Allowed values of the fields chosen by name.
ATTENTION_IMPLS = ("einsum", "fused")
NORM_PLACEMENTS = ("post", "pre")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
REMAT_POLICIES = ("none", "full", "dots")
# A saved config that lacks a field was written before the field existed, and meant the
# behaviour the code had then (not today's default, where the two differ).
LEGACY_DEFAULTS: dict[str, Any] = {"scan_layers": False}  # every layer its own subtree

# Fields that change how the model is computed, not its parameters: a checkpoint
# saved with other values of these restores and continues. Variants add theirs.
EXECUTION_FIELDS = ("dropout_rate", "attention_dropout_rate", "dtype", "remat",
                    "attention_impl", "sparse_final_layer", "size") + tuple(
    f"{name}.{field}" for name, v in registry.with_settings().items()
    for field in v.execution_fields)


@dataclasses.dataclass(frozen=True)
class ModelFields:
    """Every model field with its default (BERT-base) and meaning. configs/model.py
    builds its ConfigDict from these, so this is the one place defaults live. The
    settings of attention variants that have their own are fields too, one per variant,
    added from the registry below (ModelConfig)."""

    size: str = "base"  # key of configs/model.py SIZES this config started from (informational)
    vocab_size: int = 30522  # WordPiece vocabulary; train.py sets it from the tokenizer
    num_layers: int = 12  # encoder layers
    hidden_size: int = 768  # model width D
    num_heads: int = 12  # attention heads N (softmax heads for talking heads)
    key_size: int | None = None  # per-head query/key width K; None -> D/N
    value_size: int | None = None  # per-head value width V; None -> D/N
    mlp_dim: int = 3072  # feed-forward width F
    max_position_embeddings: int = 512  # learned absolute positions
    type_vocab_size: int = 2  # segment A/B embeddings
    attention: str = "multi_head"  # registry name (attention/registry.py)
    attention_impl: str = "einsum"  # einsum (reference) | fused (jax.nn.dot_product_attention)
    norm_placement: str = "post"  # post (original BERT) | pre (LayerNorm before each sublayer)
    dropout_rate: float = 0.1  # hidden dropout (embeddings, residual branches, classifier)
    attention_dropout_rate: float = 0.1  # dropout on attention weights
    layer_norm_eps: float = 1e-12  # BERT's LayerNorm epsilon
    initializer_range: float = 0.02  # stddev of the truncated-normal init, as BERT
    dtype: str = "float32"  # compute dtype: float32 | bfloat16 (params stay float32)
    remat: str = "none"  # none | full | dots: rematerialisation policy per encoder layer
    # Last layer only at the positions the loss reads (MLM: masked; classification: [CLS]).
    # Same values, fewer FLOPs (BERT-base: 5%); its dropout draws differ from False's, so
    # runs are not bit-identical across the two settings (docs/PERFORMANCE.md).
    sparse_final_layer: bool = True
    # Layers stacked along a leading axis and run by one scanned layer (models/layers.py):
    # compile time stays flat in depth. Changes the parameter layout (models/layout.py
    # converts), so a run resumes only in the layout it started with. Off by default, by
    # measurement (docs/PERFORMANCE.md (j)): on CPU BERT-base compiles 2x faster scanned
    # (4.9x at 24 layers) but steps 7-15% slower, and XLA's TPU v4 plan needs 1.8x the
    # memory; a pretraining run's thousands of steps repay the compile. GPU: unmeasured.
    scan_layers: bool = False

    def __post_init__(self) -> None:
        self.validate()

    # -- derived sizes -------------------------------------------------------
    @property
    def head_key_size(self) -> int:
        """Per-head query/key width K (the low-rank paper's knob), as the variant says
        (attention.base.Attention.key_size: unset, D / h_k)."""
        return registry.get(self.attention).key_size(self)

    @property
    def head_value_size(self) -> int:
        """Per-head value width V, as the variant says (unset: D / h_v)."""
        return registry.get(self.attention).value_size(self)

    @property
    def num_logit_heads(self) -> int:
        """Heads that produce logits (h_k for talking heads), as the variant says."""
        return registry.get(self.attention).logit_heads(self)

    @property
    def num_value_heads(self) -> int:
        """Heads that carry values (h_v for talking heads), as the variant says."""
        return registry.get(self.attention).value_heads(self)

    @property
    def compute_dtype(self) -> Any:
        return DTYPES[self.dtype]

    # -- construction --------------------------------------------------------
    @classmethod
    def from_config(cls, model: Any) -> ModelConfig:
        """Builds from a ConfigDict (or mapping) holding the fields above."""
        raw = dict(model.to_dict() if hasattr(model, "to_dict") else model)
        for name, value in LEGACY_DEFAULTS.items():  # a config saved before the field
            raw.setdefault(name, value)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"model: unknown field(s) {unknown}; known: {sorted(known)}")
        for name, variant in registry.with_settings().items():
            given = raw.pop(name, None) or {}
            if isinstance(given, variant.settings):  # already built
                raw[name] = given
                continue
            given = dict(given)
            known = {f.name for f in dataclasses.fields(variant.settings)}
            unknown = sorted(set(given) - known)
            if unknown:
                raise ConfigError(
                    f"model.{name}: unknown field(s) {unknown}; known: {sorted(known)}")
            raw[name] = variant.settings(**given)
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    # -- validation ----------------------------------------------------------
    def validate(self) -> None:
        def positive(name: str, value: Any) -> None:
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"model.{name}={value!r} must be a positive integer")

        for name in ("vocab_size", "num_layers", "hidden_size", "num_heads", "mlp_dim",
                     "max_position_embeddings", "type_vocab_size"):
            positive(name, getattr(self, name))
        for name in ("key_size", "value_size"):
            if getattr(self, name) is not None:
                positive(name, getattr(self, name))
        if self.attention not in registry.names():
            raise ConfigError(
                f"model.attention={self.attention!r} is unknown; choose one of {registry.names()}"
            )
        registry.get(self.attention).check_head_sizes(self)
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
        if (self.attention_impl == "fused"
                and not registry.get(self.attention).has_fused_path(self)):
            raise ConfigError(
                f"model.attention_impl='fused' exists for multi_head only, not "
                f"{self.attention!r}: heads are mixed between logits and softmax"
            )
        # The variant's own checks, and the settings of every variant that has some.
        for name in dict.fromkeys([self.attention, *registry.with_settings()]):
            registry.get(name).check_config(self)


# One field per variant with settings of its own (model.<name>.*, its frozen settings
# dataclass), made from the registry: a new variant adds its settings in its own file.
ModelConfig = dataclasses.make_dataclass(
    "ModelConfig",
    [(name, variant.settings, dataclasses.field(default_factory=variant.settings))
     for name, variant in registry.with_settings().items()],
    bases=(ModelFields,), frozen=True, namespace={"__module__": __name__})
ModelConfig.__doc__ = ModelFields.__doc__


def describe_attention(config: ModelConfig) -> str:
    """The attention and its settings in words, e.g. 'talking_heads (heads 12, key size
    64, value size 64, h_k 12, h_v 12, projections both, ..., dynamic projections off)':
    the head counts and sizes as the variant resolves them (h_k: heads that make logits,
    h_v: heads that carry values), then each of the variant's own settings that changes
    its parameters or maths (not its execution fields), unset ones left to the counts."""
    variant = registry.variant(config.attention)
    parts = [f"heads {config.num_heads}", f"key size {config.head_key_size}",
             f"value size {config.head_value_size}", f"h_k {config.num_logit_heads}",
             f"h_v {config.num_value_heads}"]
    if variant.settings is not None:
        settings = getattr(config, config.attention)
        for field in dataclasses.fields(settings):
            value = getattr(settings, field.name)
            if field.name in variant.execution_fields or value is None:
                continue
            shown = "off" if value in ("", ()) else value
            parts.append(f"{field.name.replace('_', ' ')} {shown}")
    return f"{config.attention} ({', '.join(parts)})"
