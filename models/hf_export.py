"""Export this model's parameters as a Hugging Face transformers directory (PyTorch names,
safetensors): the inverse of models/hf_import.py.

A row with BERT's shapes (multi-head, key and value size hidden/heads, post-LN) becomes a
plain `bert` model that `AutoModelForMaskedLM.from_pretrained(DIR)` (or
AutoModelForSequenceClassification, AutoModel) builds with no code of ours. Any other row
becomes a `bert_ablation` model: config.json names the classes of
models/modeling_bert_ablation.py, which is copied beside the weights, and transformers
builds them with `trust_remote_code=True`.

Layouts: ours are [in, ...out] with the head axis split out (query [D, N, K], out
[G, V, D]); PyTorch's linear weights are [out, in] with heads flattened, which is
the reshape-and-transpose here (and its inverse in hf_import.py).

Needs numpy and safetensors only: exporting does not need torch or transformers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models import layout
from models.config import ModelConfig

# Talking heads' mixing parameters: the static matrices and the dynamic maps.
MIXING = ("logits_mixing", "weights_mixing") + tuple(
    f"{side}_mixing_from_{at}" for side in ("logits", "weights") for at in ("queries", "keys"))


def full_mixing(name: str, p: Any) -> np.ndarray:
    """Talking heads' mixing matrix or dynamic map; grouped blocks, (R, n, h) or a
    dynamic map's (D, R, n, h), as their block-diagonal (R n, R h) matrices, which
    compute the same mixing."""
    import scipy.linalg

    p = np.asarray(p)
    if p.ndim == (4 if "_from_" in name else 3):  # grouped
        if p.ndim == 4:
            return np.stack([scipy.linalg.block_diag(*row) for row in p])
        return scipy.linalg.block_diag(*p)
    return p

MODELING_FILE = "modeling_bert_ablation.py"
ABLATION_MODEL_TYPE = "bert_ablation"
# The ablation classes transformers' Auto* factories build from the copied file.
ABLATION_AUTO_MAP = {
    "AutoConfig": "BertAblationConfig",
    "AutoModel": "BertAblationModel",
    "AutoModelForMaskedLM": "BertAblationForMaskedLM",
    "AutoModelForSequenceClassification": "BertAblationForSequenceClassification",
}


# The attention variants models/modeling_bert_ablation.py implements in PyTorch.
EXPORTABLE_ATTENTION = ("multi_head", "talking_heads")


def check_exportable(config: ModelConfig) -> None:
    """ExportError for a model the PyTorch classes cannot compute."""
    if config.attention not in EXPORTABLE_ATTENTION:
        raise ExportError(
            f"model.attention={config.attention!r} has no PyTorch class in {MODELING_FILE} "
            f"(it implements {', '.join(EXPORTABLE_ATTENTION)}); it cannot be exported")


def is_plain_bert(config: ModelConfig) -> bool:
    """True when transformers' own BertModel computes this row."""
    per_head = config.hidden_size // config.num_heads
    return (config.attention == "multi_head" and config.norm_placement == "post"
            and config.hidden_size % config.num_heads == 0
            and config.head_key_size == per_head and config.head_value_size == per_head)


# -- config.json -----------------------------------------------------------------------
def hf_config(config: ModelConfig, labels: Sequence[str] | None = None,
              regression: bool = False, source: str = "") -> dict[str, Any]:
    """config.json for BertForMaskedLM (labels None, not regression) or
    ...ForSequenceClassification (label names in id order; regression: one output)."""
    plain = is_plain_bert(config)
    head = "ForSequenceClassification" if labels is not None or regression else "ForMaskedLM"
    out: dict[str, Any] = {
        "architectures": [("Bert" if plain else "BertAblation") + head],
        "model_type": "bert" if plain else ABLATION_MODEL_TYPE,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.mlp_dim,
        "hidden_act": "gelu",  # exact (erf) GELU, as models/layers.py
        "hidden_dropout_prob": config.dropout_rate,
        "attention_probs_dropout_prob": config.attention_dropout_rate,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": 0,  # the project's tokenizers put [PAD] at 0
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,  # the MLM decoder is the word embedding matrix
        "dtype": "float32",
    }
    if not plain:
        out.update(
            attention=config.attention, key_size=config.key_size,
            value_size=config.value_size, norm_placement=config.norm_placement,
            auto_map={auto: f"{Path(MODELING_FILE).stem}.{cls}"
                      for auto, cls in ABLATION_AUTO_MAP.items()})
        if config.attention == "talking_heads":  # grouped blocks go out as full matrices
            out["talking_heads"] = dataclasses.asdict(config.talking_heads) | {"groups": 1}
    if regression:
        out.update(num_labels=1, problem_type="regression", id2label={0: "score"},
                   label2id={"score": 0})
    elif labels is not None:
        out.update(id2label=dict(enumerate(labels)),
                   label2id={name: i for i, name in enumerate(labels)},
                   problem_type="single_label_classification")
    if source:
        out["exported_from"] = source  # provenance; transformers keeps unknown keys
    return out


# -- weights ---------------------------------------------------------------------------
def to_state_dict(params: Mapping[str, Any], config: ModelConfig) -> dict[str, np.ndarray]:
    """Our params ({'bert', 'mlm_head'} or {'bert', 'classifier'}) -> {torch name: array}."""
    out: dict[str, np.ndarray] = {}
    params = layout.to_layout(dict(params), scanned=False)  # layer i by name (layer_i)
    bert = params["bert"]

    def put(name: str, value: Any) -> None:
        out[name] = np.ascontiguousarray(np.asarray(value, np.float32))

    def linear(name: str, layer: Mapping[str, Any], in_axes: int = 1) -> None:
        kernel = np.asarray(layer["kernel"])
        rows = int(np.prod(kernel.shape[:in_axes]))
        put(f"{name}.weight", kernel.reshape(rows, -1).T)  # [out, in]
        put(f"{name}.bias", np.asarray(layer["bias"]).reshape(-1))

    def norm(name: str, layer: Mapping[str, Any]) -> None:
        put(f"{name}.weight", layer["scale"])
        put(f"{name}.bias", layer["bias"])

    embeddings = bert["embeddings"]
    for ours, theirs in (("word", "word"), ("position", "position"),
                         ("token_type", "token_type")):
        put(f"bert.embeddings.{theirs}_embeddings.weight", embeddings[ours]["embedding"])
    norm("bert.embeddings.LayerNorm", embeddings["norm"])
    for i in range(config.num_layers):
        layer, p = bert["encoder"][f"layer_{i}"], f"bert.encoder.layer.{i}"
        attention = layer["attention"]
        for name in ("query", "key", "value"):
            linear(f"{p}.attention.self.{name}", attention[name])
        for name in MIXING:
            if name in attention:  # grouped: its block-diagonal matrix, the same function
                put(f"{p}.attention.self.{name}", full_mixing(name, attention[name]))
        linear(f"{p}.attention.output.dense", attention["out"], in_axes=2)
        norm(f"{p}.attention.output.LayerNorm", layer["attention_norm"])
        linear(f"{p}.intermediate.dense", layer["mlp"]["intermediate"])
        linear(f"{p}.output.dense", layer["mlp"]["output"])
        norm(f"{p}.output.LayerNorm", layer["mlp_norm"])
    if "final_norm" in bert["encoder"]:
        norm("bert.encoder.final_norm", bert["encoder"]["final_norm"])
    linear("bert.pooler.dense", bert["pooler"])
    if "mlm_head" in params:
        head = params["mlm_head"]
        linear("cls.predictions.transform.dense", head["transform"])
        norm("cls.predictions.transform.LayerNorm", head["norm"])
        put("cls.predictions.bias", head["output_bias"])
    if "classifier" in params:
        linear("classifier", params["classifier"])
    return out


# -- the tokenizer's files -------------------------------------------------------------
def tokenizer_files(tokenizer: Any, max_length: int) -> dict[str, str]:
    """{file name: text}: tokenizer.json and vocab.txt (the project's saver), and the two
    files transformers' AutoTokenizer reads beside them."""
    from input_pipeline import tokenizer as tokenizer_lib

    normalizer = json.loads(tokenizer.to_str()).get("normalizer") or {}
    specials = {f"{name}_token": token for name, token in zip(
        ("pad", "unk", "cls", "sep", "mask"), tokenizer_lib.SPECIAL_TOKENS, strict=True)}
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": bool(normalizer.get("lowercase", True)),
        "strip_accents": normalizer.get("strip_accents"),
        "tokenize_chinese_chars": bool(normalizer.get("handle_chinese_chars", True)),
        "model_max_length": max_length,
        **specials,
    }
    return {"tokenizer_config.json": json.dumps(config, indent=2) + "\n",
            "special_tokens_map.json": json.dumps(specials, indent=2) + "\n"}


# -- the directory ---------------------------------------------------------------------
class ExportError(ValueError):
    """An export that cannot be written; the message names the path."""


def save_pretrained(params: Mapping[str, Any], config: ModelConfig, tokenizer: Any,
                    out_dir: str | os.PathLike, labels: Sequence[str] | None = None,
                    regression: bool = False, source: str = "",
                    overwrite: bool = False) -> Path:
    """Writes a transformers directory: config.json, model.safetensors, the tokenizer's
    four files and (for ablation rows) the modeling file.

    Written into a temporary directory beside `out_dir` and renamed when complete, so a
    failed or killed export leaves no directory that looks complete; an existing
    `out_dir` is replaced only with overwrite=True, and only once the new one is whole.
    """
    from safetensors.numpy import save_file

    from common.files import replaced_directory
    from input_pipeline.tokenizer import save_tokenizer

    out = Path(out_dir)
    check_exportable(config)
    if out.exists() and not overwrite:
        raise ExportError(f"{out} exists; choose a new --out or pass --overwrite")
    state = to_state_dict(params, config)
    with replaced_directory(out) as tmp:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        umask = os.umask(0)
        os.umask(umask)
        # safetensors creates its file 0600; an export is for others to read.
        os.chmod(tmp / "model.safetensors", 0o666 & ~umask)
        (tmp / "config.json").write_text(json.dumps(
            hf_config(config, labels, regression, source), indent=2) + "\n")
        save_tokenizer(tokenizer, tmp)
        for name, text in tokenizer_files(tokenizer, config.max_position_embeddings).items():
            (tmp / name).write_text(text)
        if not is_plain_bert(config):
            shutil.copyfile(Path(__file__).with_name(MODELING_FILE), tmp / MODELING_FILE)
    return out
