"""Warm starts: a new pretraining run from another run's or a Hugging Face BERT's weights
(`--config.init_from=RUN_OR_HF`), as BERT's two phases (128 tokens, then 512 from phase
1's checkpoint) or continued pretraining of a released model.

The new run gets the source's architecture, tokenizer and weights (an MLM head the
source lacks, and position rows it lacks under data.extend_positions, are initialised
as BERT's), and its own optimizer, schedule, workdir and step count. Its workdir records
where it started (warm_start.json, written before the first checkpoint), so a resume
needs neither the flag nor the source.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import flax
import ml_collections
import numpy as np

import input_pipeline
from common.files import write_json_atomic
from models import ModelConfig, layout
from models.config import EXECUTION_FIELDS
from training import checkpoint_reader, metrics, results

RECORD = "warm_start.json"
# Fields a warm start takes from its own config rather than from the source: how the
# parameters are laid out (models/layout.py converts between the layouts).
LAYOUT_FIELDS = ("scan_layers",)


class WarmStartError(ValueError):
    """A source that cannot start this run; the message names the source and the field."""


@dataclasses.dataclass
class Source:
    """The run's starting point, read once: weights, architecture and tokenizer."""

    spec: str  # config.init_from as given
    description: str  # PATH@STEP or hf:NAME (results and logs)
    model_config: ModelConfig
    params: dict[str, Any]  # {'bert', 'mlm_head'(, when the source has one)}, numpy
    tokenizer_dir: str


def read_source(spec: str, step: int | None = None) -> Source:
    """A pretraining workdir (its checkpoint at `step`, default the newest) or a Hugging
    Face BERT (hub id or directory with config.json and weights)."""
    if os.path.isdir(os.path.join(spec, "checkpoints")):
        restored = checkpoint_reader.restore_run(spec, step, name=f"init_from={spec}")
        if not isinstance(restored.config.get("model"), dict):
            raise WarmStartError(f"{restored.directory}: its config has no model settings")
        params = restored.state["params"]
        return Source(spec, f"{os.path.abspath(spec)}@{restored.step}",
                      ModelConfig.from_config(restored.config["model"]),
                      {k: params[k] for k in ("bert", "mlm_head")},
                      os.path.join(spec, "tokenizer"))
    if step is not None:
        raise WarmStartError(f"init_from_step={step}: {spec} is not a pretraining workdir "
                             f"(a Hugging Face checkpoint has one step)")
    from models.hf_import import from_pretrained

    if os.path.isdir(spec) and not os.path.isfile(os.path.join(spec, "config.json")):
        raise WarmStartError(f"init_from={spec}: neither a pretraining workdir (checkpoints/) "
                             f"nor a Hugging Face directory (config.json)")
    model_config, params, directory = from_pretrained(spec, with_directory=True)
    return Source(spec, f"hf:{spec}", model_config, params, directory)


def effective_model(source: ModelConfig, config: ml_collections.ConfigDict) -> dict[str, Any]:
    """The new run's model fields: the source's architecture with this config's execution
    settings (dropout, dtype, remat, ...), and positions extended when asked."""
    model = source.to_dict()
    # The layout is this run's choice too: with_source restacks the source's weights.
    for name in (*EXECUTION_FIELDS, *LAYOUT_FIELDS):  # 'dtype', a variant's 'talking_heads.impl'
        *parents, field = name.split(".")
        given, target = config.model, model
        for parent in parents:
            given, target = given.get(parent, {}), target.get(parent, {})
        if field in given and field in target:
            target[field] = given[field]
    length, positions = config.data.max_seq_length, source.max_position_embeddings
    if length > positions:
        if not config.data.extend_positions:
            raise WarmStartError(
                f"data.max_seq_length={length} exceeds the max_position_embeddings="
                f"{positions} of init_from={config.init_from}; set data.extend_positions=true "
                f"to add positions (initialised as BERT's)")
        model["max_position_embeddings"] = length
    return model


def apply_model(config: ml_collections.ConfigDict, model: dict[str, Any],
                skip: tuple[str, ...] = ()) -> None:
    """Sets config.model to `model`'s fields (nested variant settings included), but for
    the dotted names in `skip`."""
    with config.unlocked():
        for name, value in model.items():
            if isinstance(value, dict):
                for field, v in value.items():
                    if f"{name}.{field}" not in skip:
                        config.model[name][field] = v
            elif name not in skip:
                config.model[name] = value


def start(config: ml_collections.ConfigDict) -> Source:
    """Reads the source and checks it against the config (writing nothing); config.model
    and config.data.tokenizer then describe the new run."""
    source = read_source(config.init_from, config.init_from_step)
    tokenizer = input_pipeline.load_tokenizer(source.tokenizer_dir)
    if config.data.tokenizer:
        given = input_pipeline.load_tokenizer(config.data.tokenizer)
        if (input_pipeline.tokenizer.tokenizer_hash(given)
                != input_pipeline.tokenizer.tokenizer_hash(tokenizer)):
            raise WarmStartError(
                f"data.tokenizer={config.data.tokenizer} is not the tokenizer of "
                f"init_from={config.init_from} ({source.tokenizer_dir}): the weights' token "
                f"ids would change meaning; leave data.tokenizer unset to use the source's")
    ids = input_pipeline.tokenizer.vocab_bound(tokenizer)
    if ids != source.model_config.vocab_size:
        raise WarmStartError(
            f"init_from={config.init_from}: its tokenizer ({source.tokenizer_dir}) has ids "
            f"0..{ids - 1} but its model a vocabulary of {source.model_config.vocab_size}")
    model = effective_model(source.model_config, config)
    apply_model(config, model)
    with config.unlocked():
        config.data.tokenizer = source.tokenizer_dir
    if model["max_position_embeddings"] > source.model_config.max_position_embeddings:
        metrics.console(
            f"warning: positions {source.model_config.max_position_embeddings}.."
            f"{model['max_position_embeddings'] - 1} are new, initialised as BERT's "
            f"(data.extend_positions)")
    metrics.console(
        f"warm start from {source.description}: its architecture ({model['attention']}, "
        f"{model['num_layers']} layers, width {model['hidden_size']}, {model['num_heads']} "
        f"heads; this config's other model.* fields are not used), tokenizer and weights")
    return source


def record(workdir: str, config: ml_collections.ConfigDict, source: Source | None) -> None:
    """When a new run starts training: WORKDIR/warm_start.json says where it started, for
    its resumes; a run from random weights removes a record left by an earlier start
    that never reached a checkpoint."""
    path = os.path.join(workdir, RECORD)
    if source is None:
        if os.path.exists(path):
            os.remove(path)
        return
    write_json_atomic(path, {
        "init_from": config.init_from, "init_from_step": config.init_from_step,
        "source": source.description, "tokenizer": source.tokenizer_dir,
        "model": config.model.to_dict()})


def resume(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any] | None:
    """On a resume: the workdir's record (None for a run that did not start warm), with
    config.model and config.data.tokenizer set from it. A different init_from than the
    recorded one is refused."""
    path = os.path.join(workdir, RECORD)
    if not os.path.exists(path):
        if config.init_from:
            raise WarmStartError(
                f"{workdir} holds a run that did not start from init_from="
                f"{config.init_from}; init_from starts new runs only: use a new --workdir")
        return None
    record = results.read_json(path)  # a damaged one: ResultsError naming it
    if not isinstance(record, dict) or "model" not in record:
        raise WarmStartError(f"{path}: not a warm-start record; move it away to resume as a "
                             f"run that started from random weights")
    if config.init_from and config.init_from != record["init_from"]:
        raise WarmStartError(
            f"{workdir} started from init_from={record['init_from']}, not "
            f"{config.init_from}; use a new --workdir")
    # The layout stays this config's: a resume in the other one is refused by the
    # checkpoint's architecture check (training/resume.py), in one line.
    apply_model(config, record["model"], skip=(*EXECUTION_FIELDS, *LAYOUT_FIELDS))
    with config.unlocked():
        config.data.tokenizer = record["tokenizer"]
        config.init_from = record["init_from"]
        config.init_from_step = record["init_from_step"]
    return record


POSITIONS = "bert/embeddings/position/embedding"


def with_source(params: Any, source: Source, shardings: Any) -> Any:
    """`params` (a fresh init, sharded as `shardings`) with the source's weights written
    over it. Extended position embeddings take the source's rows first; the new rows keep
    their fresh (BERT) init, as does anything the source lacks (named in a warning)."""
    from training import sharding

    fresh = flax.traverse_util.flatten_dict(params, sep="/")
    values = {}
    source_params = layout.like(source.params, params)  # stacked or unrolled, as the run
    for name, value in flax.traverse_util.flatten_dict(source_params, sep="/").items():
        value = np.asarray(value, np.float32)
        if name not in fresh:
            raise WarmStartError(f"init_from={source.spec}: parameter {name} has no place in "
                                 f"the model")
        shape = tuple(fresh[name].shape)
        if name == POSITIONS and value.shape[0] < shape[0]:
            rows = np.array(sharding.to_host(fresh[name]), np.float32)
            rows[:value.shape[0]] = value
            value = rows
        if value.shape != shape:
            raise WarmStartError(f"init_from={source.spec}: {name} has shape {value.shape}, "
                                 f"the model needs {shape}")
        values[name] = value
    missing = sorted(set(fresh) - set(values))
    if missing:
        metrics.console(f"warning: init_from={source.spec} has no {', '.join(missing)}; "
                        f"initialised fresh")
    return sharding.with_values(params, values, shardings)
