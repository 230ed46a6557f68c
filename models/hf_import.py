"""Import Hugging Face BERT checkpoints into this model's parameter tree.

Accepted: a hub id (downloaded with huggingface_hub), a directory holding
config.json plus model.safetensors / pytorch_model.bin / flax_model.msgpack, or
one of those files. Every format is first normalised to PyTorch names and
[out, in] matrices, then mapped onto our tree (see models/bert.py).

PyTorch linear weights are [out, in]; ours are [in, ...out] with the head axis
split out: query [D, N, K], output [N, V, D].
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from common.errors import CheckpointError  # one class for every checkpoint error
from models import layout
from models.config import ModelConfig
from models.hf_export import ABLATION_MODEL_TYPE, MIXING

__all__ = ["CheckpointError", "convert_bert", "from_pretrained", "load_state_dict"]

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "flax_model.msgpack")


# -- reading -------------------------------------------------------------------
def load_state_dict(path: str) -> dict[str, np.ndarray]:
    """Reads a weights file (or a directory holding one) into {torch_name: array}."""
    if os.path.isdir(path):
        for name in WEIGHT_FILES:
            candidate = os.path.join(path, name)
            if os.path.exists(candidate):
                return load_state_dict(candidate)
        raise CheckpointError(f"{path}: no weights file (looked for {', '.join(WEIGHT_FILES)})")
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: checkpoint file does not exist")
    if path.endswith(".safetensors"):
        from safetensors.numpy import load_file

        return _read_weights(path, "safetensors", lambda: dict(load_file(path)))
    if path.endswith((".bin", ".pt", ".pth")):
        try:
            import torch
        except ImportError as e:  # torch is only needed for this format
            raise CheckpointError(f"{path}: reading PyTorch checkpoints needs torch") from e

        def read_torch():
            # weights_only: tensors and plain containers, never code in the pickle.
            state = torch.load(path, map_location="cpu", weights_only=True)
            return {k: v.float().numpy() for k, v in state.items()}

        return _read_weights(path, "PyTorch", read_torch)
    if path.endswith(".msgpack"):
        from flax import serialization

        def read_msgpack():
            with open(path, "rb") as f:
                return flax_to_torch_names(serialization.msgpack_restore(f.read()))

        return _read_weights(path, "Flax msgpack", read_msgpack)
    raise CheckpointError(f"{path}: unknown checkpoint format (want .safetensors, .bin, .msgpack)")


def _read_weights(path: str, kind: str, read) -> dict[str, np.ndarray]:
    """read() of a weights file; any failure is one CheckpointError naming the file. A
    pickle that holds more than tensors (code, objects) is refused as such: this project
    never unpickles code, and the message never suggests turning the check off."""
    try:
        state = read()
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - each library raises its own kinds
        if type(e).__name__ == "UnpicklingError":
            raise CheckpointError(
                f"{path}: not a plain weights file (its pickle holds objects or code, which "
                f"this project never unpickles); convert it to model.safetensors with the "
                f"tool that made it") from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"{path}: not a readable {kind} weights file "
                              f"({type(e).__name__}: {first[:200]})") from None
    if not isinstance(state, dict) or not all(
            isinstance(v, np.ndarray) for v in state.values()):
        raise CheckpointError(f"{path}: not a {kind} weights file (no name -> tensor map)")
    return state


def flax_to_torch_names(tree: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """HF Flax BERT params -> PyTorch names and layouts."""
    out: dict[str, np.ndarray] = {}

    def walk(node: Mapping[str, Any], prefix: list[str]) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping):
                walk(value, prefix + [key])
                continue
            value = np.asarray(value, dtype=np.float32)
            if key == "kernel":
                key, value = "weight", value.T
            elif key in ("embedding", "scale"):
                key = "weight"
            out[".".join(prefix + [key])] = value

    walk(tree, [])
    # HF Flax keeps the MLM output bias at cls.predictions.bias like PyTorch.
    return out


# config.json keys of a `bert_ablation` export (models/hf_export.py) that are ModelConfig
# fields under the same name.
ABLATION_FIELDS = ("attention", "key_size", "value_size", "norm_placement")


def model_config_from_hf(hf_config: Mapping[str, Any], **overrides: Any) -> ModelConfig:
    """Our ModelConfig from a Hugging Face BertConfig dict (config.json), or from the
    config.json of a `bert_ablation` export (its attention variant included)."""
    from attention import registry

    act = hf_config.get("hidden_act", "gelu")
    if act != "gelu":
        raise CheckpointError(f"config.json: hidden_act={act!r}; only exact 'gelu' (BERT) is built")
    model_type = hf_config.get("model_type", "bert")
    if model_type not in ("bert", ABLATION_MODEL_TYPE):
        raise CheckpointError(f"config.json: model_type={model_type!r}; only 'bert' and "
                              f"{ABLATION_MODEL_TYPE!r} (this project's exports) are read")
    fields = dict(
        vocab_size=hf_config["vocab_size"],
        num_layers=hf_config["num_hidden_layers"],
        hidden_size=hf_config["hidden_size"],
        num_heads=hf_config["num_attention_heads"],
        mlp_dim=hf_config["intermediate_size"],
        max_position_embeddings=hf_config["max_position_embeddings"],
        type_vocab_size=hf_config["type_vocab_size"],
        dropout_rate=hf_config.get("hidden_dropout_prob", 0.1),
        attention_dropout_rate=hf_config.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=hf_config.get("layer_norm_eps", 1e-12),
        initializer_range=hf_config.get("initializer_range", 0.02),
        size="hf",
    )
    if model_type == ABLATION_MODEL_TYPE:
        fields.update({k: hf_config[k] for k in ABLATION_FIELDS if k in hf_config})
        for name, variant in registry.with_settings().items():  # e.g. talking_heads
            fields[name] = variant.settings(**hf_config.get(name) or {})
    fields.update(overrides)
    return ModelConfig(**fields)


def from_pretrained(name_or_path: str, revision: str | None = None, with_directory=False):
    """(ModelConfig, params[, directory]) from a hub id or a local directory/file.

    A hub id is fetched with huggingface_hub.snapshot_download (the cache and
    HF_HUB_OFFLINE are honoured as usual), with its vocab.txt/tokenizer.json.
    """
    directory = name_or_path
    if not os.path.exists(name_or_path):
        if name_or_path.startswith(("/", ".", "~")) or name_or_path.count("/") > 1:
            # A path, not a hub id (ORG/NAME): say so rather than ask the hub for it.
            raise CheckpointError(f"{name_or_path}: no such directory or file")
        from huggingface_hub import snapshot_download

        directory = snapshot_download(
            name_or_path, revision=revision,
            allow_patterns=["config.json", "vocab.txt", "tokenizer.json", *WEIGHT_FILES],
        )
    config_path = (
        os.path.join(directory, "config.json")
        if os.path.isdir(directory)
        else os.path.join(os.path.dirname(directory), "config.json")
    )
    if not os.path.exists(config_path):
        raise CheckpointError(f"{config_path}: missing (needed for the model's sizes)")
    try:
        with open(config_path) as f:
            hf_config = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{config_path}: not a readable JSON config ({e})") from None
    if not isinstance(hf_config, dict):
        raise CheckpointError(f"{config_path}: holds no JSON object")
    try:
        config = model_config_from_hf(hf_config)
    except KeyError as e:
        raise CheckpointError(f"{config_path}: has no {e.args[0]!r} (a BERT config needs "
                              f"it)") from None
    except CheckpointError as e:  # its message starts with "config.json:"
        raise CheckpointError(f"{config_path}: {str(e).removeprefix('config.json: ')}"
                              ) from None
    # convert_bert names layers one by one; the model's layout may stack them.
    converted = layout.to_layout(convert_bert(load_state_dict(directory), config),
                                 config.scan_layers)
    params = fill_missing(converted, config)
    if with_directory:
        return config, params, directory if os.path.isdir(directory) else os.path.dirname(
            directory)
    return config, params


def fill_missing(converted: dict[str, Any], config: ModelConfig, seed: int = 0):
    """Adds freshly initialised parameters for parts the checkpoint lacks (pooler,
    MLM head), with a warning naming them, so the result is a full BertForMaskedLM tree."""
    import flax
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from absl import logging

    from models.bert import BertForMaskedLM

    ids = jnp.zeros((1, 2), jnp.int32)
    fresh = nn.unbox(BertForMaskedLM(config).init(jax.random.key(seed), ids))["params"]
    fresh_flat = flax.traverse_util.flatten_dict(fresh, sep="/")
    have = flax.traverse_util.flatten_dict(converted, sep="/")
    missing = sorted(set(fresh_flat) - set(have))
    if missing:
        logging.warning("checkpoint lacks %s; initialised fresh", ", ".join(missing))
    merged = {**fresh_flat, **{k: v for k, v in have.items() if k in fresh_flat}}
    return flax.traverse_util.unflatten_dict(merged, sep="/")


# -- mapping -------------------------------------------------------------------
def convert_bert(state: Mapping[str, np.ndarray], config: ModelConfig) -> dict[str, Any]:
    """{torch_name: array} -> our params {'bert': ..., 'mlm_head' or 'classifier': ...}
    (heads if present), in the unrolled layout (layer_i): models/layout.py stacks it
    for a scanned model."""
    reader = _Reader(state)
    d, n, g = config.hidden_size, config.num_logit_heads, config.num_value_heads
    k, v = config.head_key_size, config.head_value_size

    def linear(name: str, in_shape: tuple[int, ...] = (), out_shape: tuple[int, ...] = ()):
        weight = reader.take(f"{name}.weight").T  # [in, out]
        bias = reader.take(f"{name}.bias")
        in_shape = in_shape or (weight.shape[0],)
        out_shape = out_shape or (weight.shape[1],)
        return {"kernel": weight.reshape(*in_shape, *out_shape), "bias": bias.reshape(out_shape)}

    def norm(name: str):
        return {"scale": reader.take(f"{name}.weight", f"{name}.gamma"),
                "bias": reader.take(f"{name}.bias", f"{name}.beta")}

    bert: dict[str, Any] = {
        "embeddings": {
            "word": {"embedding": reader.take("embeddings.word_embeddings.weight")},
            "position": {"embedding": reader.take("embeddings.position_embeddings.weight")},
            "token_type": {"embedding": reader.take("embeddings.token_type_embeddings.weight")},
            "norm": norm("embeddings.LayerNorm"),
        },
        "encoder": {},
    }
    # BertForMaskedLM checkpoints have no pooler; from_pretrained fills it fresh.
    if reader.has("pooler.dense.weight"):
        bert["pooler"] = linear("pooler.dense")
    for i in range(config.num_layers):
        p = f"encoder.layer.{i}"
        attention = {
            "query": linear(f"{p}.attention.self.query", out_shape=(n, k)),
            "key": linear(f"{p}.attention.self.key", out_shape=(n, k)),
            "value": linear(f"{p}.attention.self.value", out_shape=(g, v)),
            "out": linear(f"{p}.attention.output.dense", in_shape=(g, v), out_shape=(d,)),
        }
        for name in MIXING:  # talking heads' P_l, P_w and their dynamic maps
            if reader.has(f"{p}.attention.self.{name}"):
                attention[name] = reader.take(f"{p}.attention.self.{name}")
        bert["encoder"][f"layer_{i}"] = {
            "attention": attention,
            "attention_norm": norm(f"{p}.attention.output.LayerNorm"),
            "mlp": {
                "intermediate": linear(f"{p}.intermediate.dense"),
                "output": linear(f"{p}.output.dense"),
            },
            "mlp_norm": norm(f"{p}.output.LayerNorm"),
        }
    if reader.has("encoder.final_norm.weight"):  # pre-LN
        bert["encoder"]["final_norm"] = norm("encoder.final_norm")
    params: dict[str, Any] = {"bert": bert}
    if reader.has("classifier.weight"):  # a ...ForSequenceClassification checkpoint
        params["classifier"] = linear("classifier")
    if reader.has("cls.predictions.bias"):
        params["mlm_head"] = {
            "transform": linear("cls.predictions.transform.dense"),
            "norm": norm("cls.predictions.transform.LayerNorm"),
            "output_bias": reader.take("cls.predictions.bias"),
        }
    reader.check_word_embeddings(config.vocab_size)
    return params


class _Reader:
    """Looks names up with or without the 'bert.' prefix and tracks what was used."""

    def __init__(self, state: Mapping[str, np.ndarray]):
        self.state = {k: np.asarray(v, dtype=np.float32) for k, v in state.items()}

    def _find(self, name: str) -> str | None:
        for candidate in (name, f"bert.{name}"):
            if candidate in self.state:
                return candidate
        return None

    def has(self, name: str) -> bool:
        return self._find(name) is not None

    def take(self, *names: str) -> np.ndarray:
        for name in names:
            found = self._find(name)
            if found is not None:
                return self.state[found]
        raise CheckpointError(f"checkpoint has no parameter {names[0]!r} (nor with 'bert.' prefix)")

    def check_word_embeddings(self, vocab_size: int) -> None:
        rows = self.take("embeddings.word_embeddings.weight").shape[0]
        if rows != vocab_size:
            raise CheckpointError(
                f"checkpoint vocabulary has {rows} rows but model.vocab_size={vocab_size}"
            )
