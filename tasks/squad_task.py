"""SQuAD v1.1 as a fine-tuning task (eval_squad.py, configs/squad.py).

BertForQuestionAnswering, the span objective and per-token predictions; a score that
decodes answers (squad.decode) and grades them (squad.metrics, the official v1.1
definition). One run = (learning rate, seed):

  WORKDIR/SQuAD/lr{LR}_seed{S}/result.json      EM and F1 on dev (rerun: skipped)
  WORKDIR/SQuAD/lr{LR}_seed{S}/predictions.json {question id: answer}, the official format
  WORKDIR/results.json, results.md              mean ± std over seeds at the best lr (F1)
  WORKDIR/predictions.json                      the best run's predictions
"""

from __future__ import annotations

import dataclasses
import os

import jax
import ml_collections
import numpy as np

import squad
from common.files import copy_file_atomic, write_json_atomic, write_text_atomic
from finetuning import register
from finetuning.task import Task, TaskData
from models import BertForQuestionAnswering
from training import metrics, results, steps

PREDICTIONS = "predictions.json"
LABEL_KEYS = ("start_positions", "end_positions")


@dataclasses.dataclass
class DevQuestions:
    """What scoring the dev windows needs: the questions, their windows, their golds,
    and the config's decoding settings."""

    examples: list[squad.SquadExample]
    windows: squad.Windows
    golds: dict
    n_best: int
    max_answer_length: int


class SquadFineTuning(Task):
    key = "squad"
    name = squad.TASK.name
    main_metric = squad.TASK.main_metric
    metric_names = squad.TASK.metric_names
    dev_splits = squad.TASK.dev_splits
    test_splits = squad.TASK.test_splits
    label_keys = LABEL_KEYS
    save_scores = False  # per-token logits are large; the answers are predictions.json
    config_fields = {
        # train-v1.1.json and dev-v1.1.json as the SQuAD site serves them; None loads
        # rajpurkar/squad from the Hugging Face hub.
        "squad_dir": ml_collections.config_dict.placeholder(str),
        # BERT's run_squad.py recipe: windows of 384 tokens, doc_stride 128 apart,
        # questions cut to 64 tokens, answers of at most 30 tokens from the 20 best
        # start and end logits; 2 epochs.
        "max_seq_length": 384,
        "doc_stride": 128,  # tokens between the starts of a context's windows
        "max_query_length": 64,  # question tokens kept
        "max_answer_length": 30,  # tokens of a predicted answer, at most
        "n_best": 20,  # start and end candidates per window
        "num_epochs": 2.0,
        # The span head is not exported to Hugging Face (scripts/export_hf.py exports
        # GLUE classifiers); keep the fine-tuned parameters with best or all.
        "save_model": "none",
        "eval_batch_size": 64,
    }
    short_args = {"squad_dir": "squad_dir", "doc_stride": "doc_stride",
                  "max_query": "max_query_length", "max_answer": "max_answer_length"}
    identity_keys = ("doc_stride", "max_query_length")  # the windows trained on

    # -- data -------------------------------------------------------------------------
    def read(self, config) -> tuple[list[squad.SquadExample], list[squad.SquadExample]]:
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
            metrics.console(f"note: {where}: {dev.mismatched} dev questions have an answer "
                            f"not at its answer_start; dev scores answer texts only, so they "
                            f"stay")
        return train.examples[:config.max_train_examples or None], dev.examples

    def encode(self, read, config, tokenizer) -> TaskData:
        train, dev = read
        window = dict(max_seq_length=config.max_seq_length, doc_stride=config.doc_stride,
                      max_query_length=config.max_query_length)
        train_windows = squad.make_windows(tokenizer, train, training=True, **window)
        if train_windows.unlocatable:
            metrics.console(f"warning: {train_windows.unlocatable} training answers cover "
                            f"no token of their context (skipped)")
        dev_windows = squad.make_windows(tokenizer, dev, training=False, **window)
        metrics.console(f"SQuAD: {len(train)} training questions in {len(train_windows)} "
                        f"windows, {len(dev)} dev questions in {len(dev_windows)}")
        return TaskData({"train": train_windows.arrays, "dev": dev_windows.arrays},
                        DevQuestions(dev, dev_windows, squad.gold_answers(dev),
                                     config.n_best, config.max_answer_length))

    # -- model, objective, scores -----------------------------------------------------
    def model(self, model_config):
        return BertForQuestionAnswering(model_config)

    def objective(self):
        return steps.SpanObjective()

    def predict_step(self, model, gather):
        return steps.make_span_predict_step(model, gather)

    def score(self, data: TaskData, split: str, logits: np.ndarray,
              run_dir: str) -> dict[str, float]:
        """Answers decoded from the start and end logits (padded back to the windows'
        width), written as RUN_DIR/predictions.json, then graded."""
        dev: DevQuestions = data.extra
        width = dev.windows.offsets.shape[1]
        logits = np.pad(logits, [(0, 0), (0, width - logits.shape[1]), (0, 0)],
                        constant_values=np.finfo(logits.dtype).min)
        answers = squad.best_answers(dev.examples, dev.windows, logits[..., 0],
                                     logits[..., 1], n_best=dev.n_best,
                                     max_answer_length=dev.max_answer_length)
        if jax.process_index() == 0:
            write_json_atomic(os.path.join(run_dir, PREDICTIONS), answers)
        scores = squad.evaluate(dev.golds, answers)
        return {name: scores[name] for name in self.metric_names}

    def scores_line(self, dev: dict[str, dict[str, float]]) -> str:
        return f"EM {dev['dev']['exact_match']:.2f} F1 {dev['dev']['f1']:.2f}"

    # -- results ----------------------------------------------------------------------
    def after_grid(self, summary: results.TaskSummary, data: TaskData, config,
                   workdir: str) -> None:
        """WORKDIR/predictions.json: the best run's answers."""
        if jax.process_index() == 0:
            best_dir = os.path.join(workdir, self.name, results.run_name(
                summary.best_learning_rate, summary.best_run))
            copy_file_atomic(os.path.join(best_dir, PREDICTIONS),
                             os.path.join(workdir, PREDICTIONS))

    def report(self, suite, summary: results.TaskSummary, workdir: str, label: str,
               source: str) -> str:
        """WORKDIR/results.md: EM and F1 as the papers' SQuAD column shows them."""
        cells = []
        for metric in self.metric_names:
            score = summary.scores[f"{self.name}/{metric}"]
            spread = f" ± {score.std:.1f}" if len(summary.seeds) > 1 else ""
            cells.append(f"{score.mean:.1f}{spread}")
        table = "\n".join(["| model | SQuAD v1.1 EM | SQuAD v1.1 F1 |", "|---|---|---|",
                           f"| {label} | " + " | ".join(cells) + " |"])
        if len(summary.seeds) == 1:
            table += "\n\nOne fine-tuning seed (no spread)."
        write_text_atomic(os.path.join(workdir, results.RESULTS_MARKDOWN),
                          f"SQuAD v1.1 dev, mean ± std over seeds at the best learning rate "
                          f"(lr={summary.best_learning_rate:g}, by F1); init {source}\n\n"
                          f"{table}\n")
        return table

    def files_line(self, workdir: str, suite, config, attention: str) -> str:
        return (f"wrote {os.path.join(workdir, results.RESULTS_JSON)}, "
                f"{os.path.join(workdir, results.RESULTS_MARKDOWN)} and "
                f"{os.path.join(workdir, PREDICTIONS)} (the best run's answers)")


TASK = register(SquadFineTuning())
