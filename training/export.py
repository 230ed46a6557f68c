"""A run's model as a reader wants it (scripts/export_hf.py, scripts/fill_mask.py): its
parameters, ModelConfig and tokenizer, from whatever directory the user points at.

- a pretraining workdir (checkpoints/, tokenizer/): BertForMaskedLM, at a given step,
  "best" (the lowest eval loss saved; the newest when none was) or "latest";
- a GLUE workdir of eval_glue.py (glue_identity.json): a task's best run, the one GLUE's
  submission comes from (the best learning rate's best seed);
- one GLUE run directory (TASK/lr{LR}_seed{S} holding model/);
- a Hugging Face BERT directory (config.json and weights: an export, or a download).
A fine-tuned model is BertForSequenceClassification with its task.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import glue
from input_pipeline import load_tokenizer
from models import ModelConfig
from models.hf_export import save_pretrained
from training import checkpoint_reader, results
from training.checkpoints import CheckpointError

GLUE_IDENTITY = results.FINE_TUNING_IDENTITY  # written by finetuning/suite.py
FINE_TUNED_MODEL, TOKENIZER = results.FINE_TUNED_MODEL, results.TOKENIZER_DIR


@dataclasses.dataclass
class RunModel:
    params: dict[str, Any]  # {'bert', 'mlm_head'} or {'bert', 'classifier'}
    model_config: ModelConfig
    tokenizer: Any  # tokenizers.Tokenizer
    source: str  # PATH@STEP
    task: glue.GlueTask | None = None  # set for a fine-tuned model


def read_run_model(workdir: str, step: int | str = "best", task: str | None = None
                   ) -> RunModel:
    """The model in `workdir` (see the module docstring); CheckpointError naming the
    directory when there is none. `step` applies to pretraining runs, `task` to GLUE
    workdirs (needed when they hold several tasks)."""
    if not os.path.isdir(workdir):
        raise CheckpointError(f"{workdir}: no such directory")
    if os.path.isfile(os.path.join(workdir, GLUE_IDENTITY)):
        return _fine_tuned(_best_run_dir(workdir, task), os.path.join(workdir, TOKENIZER))
    if os.path.isdir(os.path.join(workdir, FINE_TUNED_MODEL)):
        glue_workdir = os.path.dirname(os.path.dirname(os.path.abspath(workdir)))
        return _fine_tuned(workdir, os.path.join(glue_workdir, TOKENIZER))
    if results.RunResult.read(workdir) is not None:
        raise CheckpointError(f"{workdir}: this GLUE run kept no {FINE_TUNED_MODEL}/ (it was "
                              f"fine-tuned with save_model=none, or was not the best run)")
    if not os.path.isdir(os.path.join(workdir, "checkpoints")) and os.path.isfile(
            os.path.join(workdir, "config.json")):
        return _hugging_face(workdir)
    restored = checkpoint_reader.restore_run(workdir, None if step == "latest" else step)
    model_config = _model_config(restored.config, restored.directory)
    tokenizer = load_tokenizer(os.path.join(workdir, "tokenizer"))
    params = {k: restored.state["params"][k] for k in ("bert", "mlm_head")}
    return RunModel(params, model_config, tokenizer,
                    f"{os.path.abspath(workdir)}@{restored.step}")


def _hugging_face(directory: str) -> RunModel:
    """A Hugging Face BERT directory (config.json, weights, tokenizer): BertForMaskedLM;
    a checkpoint without an MLM head (BertModel) gets a fresh one, named in a warning."""
    from models.hf_import import from_pretrained

    model_config, params = from_pretrained(directory)
    return RunModel({k: params[k] for k in ("bert", "mlm_head")}, model_config,
                    load_tokenizer(directory), f"hf:{os.path.abspath(directory)}")


def _model_config(saved: dict[str, Any], where: str) -> ModelConfig:
    if not isinstance(saved.get("model"), dict):
        raise CheckpointError(f"{where}: its config has no model settings")
    return ModelConfig.from_config(saved["model"])


def _best_run_dir(workdir: str, task: str | None) -> str:
    summary = results.FineTuningResults.read(workdir)
    if summary is None or not summary.tasks:
        raise CheckpointError(f"{workdir}: no finished GLUE task (results.json) to export")
    if task is None:
        if len(summary.tasks) > 1:
            raise CheckpointError(f"{workdir} holds {', '.join(sorted(summary.tasks))}: "
                                  f"choose one with --task")
        name = next(iter(summary.tasks))
    else:
        name = glue.get_task(task).name
        if name not in summary.tasks:
            raise CheckpointError(f"{workdir}: no finished {name} "
                                  f"(it holds {', '.join(sorted(summary.tasks)) or 'none'})")
    best = summary.tasks[name]
    return os.path.join(workdir, name, results.run_name(best.best_learning_rate,
                                                             best.best_run))


def _fine_tuned(run_dir: str, tokenizer_dir: str) -> RunModel:

    if not os.path.isdir(os.path.join(run_dir, FINE_TUNED_MODEL)):
        raise CheckpointError(f"{run_dir}: no {FINE_TUNED_MODEL}/ (fine-tuned with "
                              f"save_model=none, or pruned when it was not the best run)")
    restored = checkpoint_reader.restore_run(run_dir, subdir=FINE_TUNED_MODEL)
    saved = restored.config
    params = restored.state["params"]
    return RunModel({k: params[k] for k in ("bert", "classifier")},
                    _model_config(saved, restored.directory), load_tokenizer(tokenizer_dir),
                    f"{os.path.abspath(run_dir)}@{restored.step}", glue.get_task(saved["task"]))


def export(workdir: str, out: str, step: int | str = "best", task: str | None = None,
           overwrite: bool = False) -> RunModel:
    """Writes `workdir`'s model as a transformers directory `out` (models/hf_export.py)."""
    model = read_run_model(workdir, step, task)
    labels = None
    if model.task is not None and not model.task.is_regression:
        labels = model.task.hub_label_names or model.task.labels
    save_pretrained(model.params, model.model_config, model.tokenizer, out, labels=labels,
                    regression=model.task is not None and model.task.is_regression,
                    source=model.source, overwrite=overwrite)
    return model
