"""SQuAD v1.1 fine-tuning: everything eval_squad.py runs, as importable functions.

The run is GLUE's (training/finetune.py: the same mesh, sharded state, optimizer
builder, train step, checkpoints, SIGTERM resume and result records); what differs is a
`Tuning`: BertForQuestionAnswering, the span objective, per-token predictions and a
score that decodes answers (squad.decode) and grades them (squad.metrics, the official
v1.1 definition). One run = (learning rate, seed):

  WORKDIR/SQuAD/lr{LR}_seed{S}/result.json      EM and F1 on dev (rerun: skipped)
  WORKDIR/SQuAD/lr{LR}_seed{S}/predictions.json {question id: answer}, the official format
  WORKDIR/results.json, results.md              mean ± std over seeds at the best lr (F1)
  WORKDIR/predictions.json                      the best run's predictions
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import ml_collections
import numpy as np

import squad
from common.files import copy_file_atomic, write_json_atomic, write_text_atomic
from models import BertForQuestionAnswering
from training import finetune, metrics, results, steps
from training import workdir as workdir_lib
from training.cli import Stopped
from training.preemption import PreemptionFlag
from training.workdir import WorkdirLock

PREDICTIONS = "predictions.json"
LABEL_KEYS = ("start_positions", "end_positions")


@dataclasses.dataclass
class SquadData:
    arrays: dict[str, dict[str, np.ndarray]]  # {"train": windows, "dev": windows}
    dev_examples: list[squad.SquadExample]
    dev_windows: squad.Windows


def read_questions(config: ml_collections.ConfigDict
                   ) -> tuple[list[squad.SquadExample], list[squad.SquadExample]]:
    """(train, dev) questions, read before any model is loaded (a broken file fails
    first); what BERT skips is skipped here too, and counted aloud."""
    where = config.squad_dir or f"hub {squad.data.HUB_DATASET}"
    train = squad.load_split(squad.TRAIN, config.squad_dir)
    if train.skipped:
        metrics.console(f"warning: {where}: {train.skipped} training questions skipped: "
                        f"the answer text is not the context at answer_start (BERT's "
                        f"run_squad.py skips them too)")
    dev = squad.load_split(squad.DEV, config.squad_dir)
    squad.warn_shared_ids(train, dev)  # leakage: said, not refused (a user's own split)
    if dev.mismatched:
        metrics.console(f"note: {where}: {dev.mismatched} dev questions have an answer not at "
                        f"its answer_start; dev scores answer texts only, so they stay")
    return train.examples[:config.max_train_examples or None], dev.examples


def make_data(config: ml_collections.ConfigDict, tokenizer, train: list[squad.SquadExample],
              dev: list[squad.SquadExample]) -> SquadData:
    window = dict(max_seq_length=config.max_seq_length, doc_stride=config.doc_stride,
                  max_query_length=config.max_query_length)
    train_windows = squad.make_windows(tokenizer, train, training=True, **window)
    if train_windows.unlocatable:
        metrics.console(f"warning: {train_windows.unlocatable} training answers cover no "
                        f"token of their context (skipped)")
    dev_windows = squad.make_windows(tokenizer, dev, training=False, **window)
    metrics.console(f"SQuAD: {len(train)} training questions in {len(train_windows)} "
                    f"windows, {len(dev)} dev questions in {len(dev_windows)}")
    return SquadData({"train": train_windows.arrays, "dev": dev_windows.arrays}, dev,
                     dev_windows)


def squad_tuning(data: SquadData, config: ml_collections.ConfigDict) -> finetune.Tuning:
    golds = squad.gold_answers(data.dev_examples)
    width = data.dev_windows.offsets.shape[1]

    def score(split: str, logits: np.ndarray, run_dir: str) -> dict[str, float]:
        logits = np.pad(logits, [(0, 0), (0, width - logits.shape[1]), (0, 0)],
                        constant_values=np.finfo(logits.dtype).min)
        answers = squad.best_answers(data.dev_examples, data.dev_windows, logits[..., 0],
                                     logits[..., 1], n_best=config.n_best,
                                     max_answer_length=config.max_answer_length)
        if jax.process_index() == 0:
            write_json_atomic(os.path.join(run_dir, PREDICTIONS), answers)
        scores = squad.evaluate(golds, answers)
        return {name: scores[name] for name in squad.TASK.metric_names}

    return finetune.Tuning(
        task=squad.TASK, model=BertForQuestionAnswering, objective=steps.SpanObjective(),
        predict_step=steps.make_span_predict_step, label_keys=LABEL_KEYS, score=score,
        save_scores=False)


def run(config: ml_collections.ConfigDict, workdir: str, devices=None) -> dict[str, Any]:
    finetune.length_buckets(config.length_buckets, config.max_seq_length)  # fail first
    if config.save_model not in finetune.SAVE_MODEL:
        raise ValueError(f"save_model={config.save_model!r} is unknown; choose one of "
                         f"{', '.join(finetune.SAVE_MODEL)}")
    mesh_and_rules = finetune.make_mesh(config, devices)
    with workdir_lib.started(workdir), WorkdirLock(workdir), PreemptionFlag() as preemption:
        return _run(config, workdir, mesh_and_rules, preemption)


def _run(config: ml_collections.ConfigDict, workdir: str, mesh_and_rules,
         preemption: PreemptionFlag) -> dict[str, Any]:
    train, dev = read_questions(config)
    pretrained = finetune.load_pretrained(config)
    finetune.check_workdir_identity(workdir, pretrained, config)
    data = make_data(config, pretrained.tokenizer, train, dev)
    tuning = squad_tuning(data, config)
    runs = []
    total = len(config.learning_rates) * config.num_seeds
    for lr in config.learning_rates:
        for seed in range(config.num_seeds):
            if preemption.requested():
                raise Stopped(f"{preemption.signal_name}: stopped before lr={lr:g} "
                              f"seed={seed} (finished runs are saved); rerun the same "
                              f"command to continue")
            run_dir = os.path.join(workdir, squad.TASK.name, results.glue_run_name(lr, seed))
            result = finetune.finetune_run(tuning, pretrained, data.arrays, float(lr), seed,
                                           config, run_dir, mesh_and_rules, preemption)
            runs.append(results.RunResult.from_json(result))
            dev = result["dev"]["dev"]
            metrics.console(f"SQuAD [{len(runs)}/{total}] lr={lr:g} seed={seed}: "
                            f"EM {dev['exact_match']:.2f} F1 {dev['f1']:.2f}")
    summary = results.TaskSummary.from_runs(squad.TASK, runs)
    best_dir = os.path.join(workdir, squad.TASK.name,
                            results.glue_run_name(summary.best_learning_rate, summary.best_run))
    if jax.process_index() == 0:
        if config.save_model == "best":
            finetune.prune_fine_tuned(squad.TASK, summary, config, workdir)
        copy_file_atomic(os.path.join(best_dir, PREDICTIONS), os.path.join(workdir, PREDICTIONS))
    suite = results.GlueResults.continued(pretrained.source, results.GlueResults.read(workdir))
    suite.record(squad.TASK.name, summary)
    suite.write(workdir)
    label = f"{pretrained.model_config.attention} ({pretrained.model_config.size})"
    metrics.console(write_markdown(workdir, summary, label, pretrained.source))
    metrics.console(f"wrote {os.path.join(workdir, results.GLUE_RESULTS)}, "
                    f"{os.path.join(workdir, results.GLUE_MARKDOWN)} and "
                    f"{os.path.join(workdir, PREDICTIONS)} (the best run's answers)")
    return suite.to_json()


def write_markdown(workdir: str, summary: results.TaskSummary, label: str, init: str) -> str:
    """WORKDIR/results.md: EM and F1 as the papers' SQuAD column shows them."""
    cells = []
    for metric in squad.TASK.metric_names:
        score = summary.scores[f"{squad.TASK.name}/{metric}"]
        spread = f" ± {score.std:.1f}" if len(summary.seeds) > 1 else ""
        cells.append(f"{score.mean:.1f}{spread}")
    table = "\n".join(["| model | SQuAD v1.1 EM | SQuAD v1.1 F1 |", "|---|---|---|",
                       f"| {label} | " + " | ".join(cells) + " |"])
    if len(summary.seeds) == 1:
        table += "\n\nOne fine-tuning seed (no spread)."
    write_text_atomic(os.path.join(workdir, results.GLUE_MARKDOWN),
                      f"SQuAD v1.1 dev, mean ± std over seeds at the best learning rate "
                      f"(lr={summary.best_learning_rate:g}, by F1); init {init}\n\n{table}\n")
    return table
