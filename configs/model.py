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

# Short argument names -> model config fields, with how to parse the value.
MODEL_ARGS: dict[str, str] = {
    "size": "size",
    "row": "row",
    "attention": "attention",  # multi_head | talking_heads
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
    "th_logit_heads": "talking_heads.num_logit_heads",
    "th_value_heads": "talking_heads.num_value_heads",
    "th_projections": "talking_heads.projections",
    "th_mask": "talking_heads.mask_placement",
    "th_init": "talking_heads.init",
    "th_impl": "talking_heads.impl",
    "th_chunk": "talking_heads.query_chunk_size",
    "th_dropout_noise": "talking_heads.dropout_noise",
}


def parse_arg(arg: str | None) -> dict[str, object]:
    """Parses 'a=1,b=x' into {'a': 1, 'b': 'x'} with ints, floats, bools and None."""
    out: dict[str, object] = {}
    if not arg:
        return out
    for item in arg.split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"config arg {item!r} is not of the form key=value")
        key, value = (s.strip() for s in item.split("=", 1))
        out[key] = parse_value(value)
    return out


def parse_value(text: str) -> object:
    lowered = text.lower()
    if lowered in ("none", "null"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def talking_heads_defaults() -> ml_collections.ConfigDict:
    th = ml_collections.ConfigDict()
    th.num_logit_heads = ml_collections.config_dict.placeholder(int)  # h_k; None -> num_heads
    th.num_value_heads = ml_collections.config_dict.placeholder(int)  # h_v; None -> num_heads
    th.projections = "both"  # both | logits | weights: which of P_l (pre-softmax), P_w (post) exist
    th.mask_placement = "after"  # after | before P_l (Mesh TensorFlow reference: after)
    th.init = "fan_in"  # fan_in (reference: normal, stddev 1/sqrt(fan_in)) | identity
    th.impl = "full"  # full | chunked (memory-efficient: query chunks, recomputed in backward)
    th.query_chunk_size = 128  # queries per chunk for impl=chunked
    # Attention dropout (applied after P_w, as the references) draws: elementwise (tf-models,
    # as multi-head) | shared_queries (Mesh TF: one mask per batch, head and key).
    th.dropout_noise = "elementwise"
    return th


def model_defaults() -> ml_collections.ConfigDict:
    m = ml_collections.ConfigDict()
    m.size = "base"  # key of SIZES this config started from (informational)
    m.vocab_size = 30522  # WordPiece vocabulary; train.py sets it from the tokenizer
    m.num_layers = 12  # encoder layers
    m.hidden_size = 768  # model width D
    m.num_heads = 12  # attention heads N (softmax heads for talking heads)
    m.key_size = ml_collections.config_dict.placeholder(int)  # per-head q/k width K; None -> D/N
    m.value_size = ml_collections.config_dict.placeholder(int)  # per-head v width V; None -> D/N
    m.mlp_dim = 3072  # feed-forward width
    m.max_position_embeddings = 512  # learned absolute positions
    m.type_vocab_size = 2  # segment A/B embeddings
    m.attention = "multi_head"  # registry name: multi_head | talking_heads
    m.attention_impl = "einsum"  # einsum (reference) | fused (jax.nn.dot_product_attention)
    m.norm_placement = "post"  # post (original BERT) | pre (LayerNorm before each sublayer)
    m.dropout_rate = 0.1  # hidden dropout (embeddings, residual branches, classifier)
    m.attention_dropout_rate = 0.1  # dropout on attention weights
    m.layer_norm_eps = 1e-12  # BERT's LayerNorm epsilon
    m.initializer_range = 0.02  # stddev of the truncated-normal init, as BERT
    m.dtype = "float32"  # compute dtype: float32 | bfloat16 (params stay float32)
    m.remat = "none"  # none | full | dots: rematerialisation policy per encoder layer
    # Last layer only at the positions the loss reads (MLM: masked; classification: [CLS]).
    # Same values, fewer FLOPs (BERT-base: 5%); its dropout draws differ from False's, so
    # runs are not bit-identical across the two settings (docs/PERFORMANCE.md).
    m.sparse_final_layer = True
    m.talking_heads = talking_heads_defaults()
    return m


def apply_size(m: ml_collections.ConfigDict, size: str) -> None:
    if size not in SIZES:
        raise ValueError(f"model.size={size!r} is unknown; choose one of {sorted(SIZES)}")
    layers, hidden, heads, mlp = SIZES[size]
    m.size = size
    m.num_layers, m.hidden_size, m.num_heads, m.mlp_dim = layers, hidden, heads, mlp


def set_field(m: ml_collections.ConfigDict, dotted: str, value: object) -> None:
    *parents, leaf = dotted.split(".")
    node = m
    for p in parents:
        node = node[p]
    node[leaf] = value


def apply_model_args(m: ml_collections.ConfigDict, args: dict[str, object]) -> None:
    """Applies the model keys of a parsed arg dict (size/row first, then the rest)."""
    from configs import grids  # local import: grids imports this module

    if "row" in args:
        grids.apply_row(m, str(args["row"]))
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
