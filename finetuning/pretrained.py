"""The encoder a fine-tuning starts from: a pretraining checkpoint (init_from), a Hugging
Face BERT (init_from_hf) or the same architecture from fresh weights (init=scratch),
with the fine-tuning's dropout and layout, checked against its tokenizer and model;
optionally with another attention variant inserted (a variant's insertion hook).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import tokenizers

import input_pipeline
from attention import registry
from models import BertModel, ModelConfig, layout
from training import checkpoint_reader, metrics, results
from training.checkpoints import CheckpointError


@dataclasses.dataclass
class Pretrained:
    model_config: ModelConfig
    bert_params: dict[str, Any] | None  # None: init=scratch, every run draws its own
    tokenizer: tokenizers.Tokenizer
    source: str  # where it came from, for results and the workdir identity check
    # init=scratch: the source run's pretraining seed, folded into every run's init key.
    # A sweep fine-tunes a scratch row once per pretraining seed; without it those runs
    # would draw the same encoders and repeat one another.
    init_stream: int = 0


INITS = ("pretrained", "scratch")


# -- loading the pretrained model ------------------------------------------------------
def load_pretrained(config: ml_collections.ConfigDict) -> Pretrained:
    from input_pipeline import load_tokenizer

    if config.init_from and config.init_from_hf:
        raise ValueError("set only one of init_from and init_from_hf")
    if config.init not in INITS:
        raise ValueError(f"init={config.init!r} is unknown; choose one of {', '.join(INITS)}")
    if config.init_from:
        workdir = config.init_from
        state, saved, step, where = checkpoint_reader.restore_run(
            workdir, config.checkpoint_step, name=f"init_from={workdir}")
        if not isinstance(saved.get("model"), dict):
            raise CheckpointError(f"{where}: its config has no model settings "
                                  f"(not a pretraining checkpoint?)")
        model_config = ModelConfig.from_config(saved["model"])
        bert = state.get("params", {}).get("bert") if isinstance(state, dict) else None
        if bert is None:
            raise CheckpointError(f"{where}: holds no params/bert (not a pretraining "
                                  f"checkpoint?)")
        tokenizer = load_tokenizer(os.path.join(workdir, "tokenizer"))
        source = f"{os.path.abspath(workdir)}@{step}"
        # A live run may be past it by now: say which checkpoint this is.
        metrics.console(f"init_from={workdir}: its checkpoint at step {step}")
        pretrain_seed = int(saved.get("seed", 0))
    elif config.init_from_hf:
        from models.hf_import import from_pretrained

        model_config, params, directory = from_pretrained(config.init_from_hf, with_directory=True)
        bert = params["bert"]
        tokenizer = load_tokenizer(directory)
        source = f"hf:{config.init_from_hf}"
        pretrain_seed = 0
    else:
        raise ValueError("set --config.init_from=PRETRAIN_WORKDIR or --config.init_from_hf=NAME")
    model_config, bert = fine_tuning_model(model_config, bert, config)
    if config.max_seq_length > model_config.max_position_embeddings:
        raise ValueError(
            f"max_seq_length={config.max_seq_length} exceeds the model's "
            f"max_position_embeddings={model_config.max_position_embeddings} ({source})")
    ids = input_pipeline.tokenizer.vocab_bound(tokenizer)
    if ids != model_config.vocab_size:
        raise CheckpointError(f"{source}: the tokenizer has ids 0..{ids - 1} but the model "
                              f"vocabulary has {model_config.vocab_size}")
    check_params_fit(bert, model_config, source)
    asked = insertion_asked(config)
    if asked:
        variant, init = asked
        model_config, bert = with_inserted(variant, model_config, bert, source, init)
        new = registry.get(variant).insertion.new_parameters
        where = "at identity" if init == "identity" else f"with {init} {new}"
        # e.g. "talking heads inserted at identity: PATH@STEP" (ends PATH@STEP)
        source = f"{variant.replace('_', ' ')} inserted {where}: {source}"
    if config.init == "scratch":
        # The architecture and tokenizer only: each run initialises every weight itself.
        bert, source = None, results.SCRATCH_START + source
        return Pretrained(model_config, bert, tokenizer, source, init_stream=pretrain_seed)
    return Pretrained(model_config, bert, tokenizer, source)


def fine_tuning_model(model_config: ModelConfig, bert: dict[str, Any], config
                      ) -> tuple[ModelConfig, dict[str, Any]]:
    """The pretrained architecture with the fine-tuning's dropout and layout (scan_layers
    None: the source's), and its encoder's weights in that layout."""
    model_config = model_config.replace(
        dropout_rate=config.dropout_rate,
        attention_dropout_rate=0.0 if model_config.attention_impl == "fused"
        else config.attention_dropout_rate,
    )
    if config.get("scan_layers") is not None:  # fine-tune in another layout than the source's
        model_config = model_config.replace(scan_layers=bool(config.scan_layers))
    return model_config, layout.to_layout(bert, model_config.scan_layers)


def insertion_asked(config) -> tuple[str, str] | None:
    """(variant, init) when the config asks for a variant inserted into the checkpoint
    (the field its Insertion names, e.g. insert_talking_heads); None when it does not."""
    asked = [(name, v.module.insertion) for name, v in registry.insertable().items()
             if config.get(v.module.insertion.flag)]
    if len(asked) > 1:
        raise ValueError(f"{' and '.join(i.flag for _, i in asked)} are both set; insert "
                         f"one variant at most")
    if not asked:
        return None
    name, insertion = asked[0]
    return name, config.get(insertion.init_field) or insertion.default_init


def inserted_config(variant: str, model_config: ModelConfig, source: str,
                    init: str | None = None) -> ModelConfig:
    """The architecture a fine-tuning with `variant` inserted runs (the variant's hook
    checks the checkpoint and the init)."""
    module = registry.get(variant)
    insertion = module.insertion
    init = init or insertion.default_init
    if init not in insertion.inits:
        raise ValueError(f"{insertion.init_field}={init!r} is unknown; choose one of "
                         f"{', '.join(insertion.inits)}")
    return module.inserted_config(model_config, source, init)


def with_inserted(variant: str, model_config: ModelConfig, bert: dict[str, Any], source: str,
                  init: str | None = None) -> tuple[ModelConfig, dict[str, Any]]:
    """A multi-head encoder as `variant`: its new parameters added to every layer by the
    variant's hook, or left out (then each fine-tuning run draws them with the rest of its
    fresh weights, the classifier, from its own seed). Either way this is the "swap the
    layer into a trained model" route a user takes, as opposed to pretraining it."""
    module = registry.get(variant)
    model_config = inserted_config(variant, model_config, source, init)
    encoder = {name: dict(layer) for name, layer in bert["encoder"].items()}
    for name, layer in encoder.items():
        if "attention" in layer:  # a layer; a pre-LN encoder also holds its final norm
            stacked = model_config.num_layers if name == layout.STACKED else None
            params = module.inserted_layer_params(layer["attention"], model_config, stacked)
            if params is None:  # drawn per run
                return model_config, bert
            layer["attention"] = params
    return model_config, {**bert, "encoder": encoder}


def check_params_fit(bert: dict[str, Any], model_config: ModelConfig, source: str) -> None:
    """Every parameter the encoder needs is there with the right shape (pooler optional)."""
    ids = jnp.zeros((1, 2), jnp.int32)
    shapes = jax.eval_shape(lambda: BertModel(model_config).init(jax.random.key(0), ids))
    want = flax.traverse_util.flatten_dict(nn.unbox(shapes)["params"], sep="/")
    have = flax.traverse_util.flatten_dict(bert, sep="/")
    for name, shape in sorted(want.items()):
        if name.startswith("pooler/") and name not in have:
            continue
        if name not in have:
            raise CheckpointError(f"{source}: parameter bert/{name} is missing")
        if tuple(np.shape(have[name])) != tuple(shape.shape):
            raise CheckpointError(
                f"{source}: bert/{name} has shape {tuple(np.shape(have[name]))}, "
                f"the model needs {tuple(shape.shape)} (a different architecture?)"
            )

