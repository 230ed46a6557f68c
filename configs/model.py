"""Model configs: BERT sizes, attention variants and the papers' rows.

Usage (any entry point that takes a config file):

  --config configs/model.py:size=base,attention=talking_heads,heads=24,key_size=128
  --config configs/model.py:row=lowrank_2a_h8

`arg` is a comma list of key=value pairs; the keys are `MODEL_ARGS` below.
`row=NAME` starts from one of the papers' rows (see configs/grids.py) and the
other keys override it. The ConfigDict is turned into the frozen
`models.config.ModelConfig` (and validated) in exactly one place:
`models.config.ModelConfig.from_config`.
"""

from __future__ import annotations

import ml_collections

from attention import registry
from configs import grids, overrides
from models.config import ModelConfig

# name: (layers, hidden, heads, mlp_dim). tiny..large are Turc et al. 2019
# ("Well-Read Students Learn Better"); base/large are BERT's. The lowrank_*
# sizes are the Bhojanapalli et al. 2020 widths (24 layers; FFN 4096 in
# Tables 1, 2A, 2B and 3072 in Table 3, which reproduces their counts).
SIZES: dict[str, tuple[int, int, int, int]] = {
    "micro": (1, 32, 2, 64),  # for unit tests only
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "medium": (8, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
    "lowrank_1024": (24, 1024, 16, 4096),
    "lowrank_512": (24, 512, 8, 4096),
    "lowrank_768": (24, 768, 12, 3072),
}

# Short argument names -> model config fields; variants add their own (th_init, ...).
MODEL_ARGS: dict[str, str] = {
    "size": "size",
    "row": "row",
    "attention": "attention",  # a registry name (attention/registry.py names())
    "impl": "attention_impl",  # einsum | fused
    "layers": "num_layers",
    "hidden": "hidden_size",
    "heads": "num_heads",
    "key_size": "key_size",
    "value_size": "value_size",
    "head_size": "head_size",  # sets key_size and value_size (the "fixed head size" form)
    "mlp": "mlp_dim",
    "norm": "norm_placement",  # post | pre
    "vocab": "vocab_size",
    "max_len": "max_position_embeddings",
    "dropout": "dropout_rate",
    "attention_dropout": "attention_dropout_rate",
    "dtype": "dtype",
    "sparse_final": "sparse_final_layer",
    "scan": "scan_layers",  # true | false: the layers as one scanned layer (stacked params)
    "init_std": "initializer_range",
    **{arg: f"{name}.{field}" for name, variant in registry.with_settings().items()
       for arg, field in variant.short_args.items()},
}

# The one parser of ARGS (kept here under their old names for existing imports).
parse_arg = overrides.parse_arg
parse_value = overrides.parse_value
set_field = overrides.set_field


def model_defaults() -> ml_collections.ConfigDict:
    """BERT-base: models.config.ModelConfig's defaults (the one place they live, with
    a comment per field), as a ConfigDict."""
    return overrides.from_dataclass(ModelConfig())


def apply_size(m: ml_collections.ConfigDict, size: str) -> None:
    if size not in SIZES:
        raise ValueError(f"model.size={size!r} is unknown; choose one of {sorted(SIZES)}")
    layers, hidden, heads, mlp = SIZES[size]
    m.size = size
    m.num_layers, m.hidden_size, m.num_heads, m.mlp_dim = layers, hidden, heads, mlp


def apply_model_args(m: ml_collections.ConfigDict, args: dict[str, object]) -> None:
    """Applies the model keys of a parsed arg dict (size/row first, then the rest)."""
    if "row" in args:
        apply_row(m, str(args["row"]))
    if "size" in args:
        apply_size(m, str(args["size"]))
    for key, value in args.items():
        if key in ("size", "row"):
            continue
        if key == "head_size":
            m.key_size = value
            m.value_size = value
            continue
        set_field(m, MODEL_ARGS[key], value)


def apply_row(m: ml_collections.ConfigDict, name: str) -> None:
    """Applies a paper row's overrides (configs/grids.py) to a model ConfigDict."""
    if name not in grids.ROWS:
        raise ValueError(f"row={name!r} is unknown; choose one of {sorted(grids.ROWS)}")
    apply_model_args(m, grids.ROWS[name].overrides)


def split_args(args: dict[str, object], other_keys: set[str]) -> dict[str, object]:
    """Returns the model keys; raises one clear error for a key nobody knows."""
    unknown = [k for k in args if k not in MODEL_ARGS and k not in other_keys]
    if unknown:
        allowed = ", ".join(sorted(set(MODEL_ARGS) | other_keys))
        raise ValueError(f"unknown config arg(s) {unknown}; allowed: {allowed}")
    return {k: v for k, v in args.items() if k in MODEL_ARGS}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """A config holding only `model` (used by scripts that build models)."""
    args = parse_arg(arg)
    config = ml_collections.ConfigDict()
    config.model = model_defaults()
    apply_model_args(config.model, split_args(args, set()))
    return config
