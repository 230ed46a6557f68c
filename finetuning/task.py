"""What the fine-tuning core needs of a task: the `Task` interface.

A task is one object registered under its config name (finetuning/registry.py); the
core (finetuning/runs.py: one (learning rate, seed) run; finetuning/suite.py: the grid,
the records and the workdir) calls only what is here. A task supplies:

  data      read(config) before the model loads (a broken file fails first), then
            encode(read, config, tokenizer) -> TaskData: the encoded splits by name
            (train, its dev splits, whichever test splits exist) and what it keeps
            to score them
  head      model(model_config): the encoder with its head (models/bert.py)
  objective objective(): the loss the train step minimises (training/steps.py)
  predict   predict_step(model, gather): params, batch -> per-example scores
  score     score(data, split, predictions, run_dir) -> {metric: value}
  report    score_name (a dev split's column), baselines (a trivial predictor's
            scores), scores_line (the console's line per run), after_grid (submissions,
            the best run's answers), no_submission, report (results.md), files_line
  config    config_fields: the task's own settings with their defaults, short_args for
            configs/finetune.py's ARG, identity_keys: the settings that make a workdir's
            protocol (a rerun with others is refused)

The defaults below are a classification task's (one `labels` key, per-example scores
saved as RUN_DIR/SPLIT_predictions.npy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


@dataclasses.dataclass
class TaskData:
    """A task's encoded data: arrays per split (input_ids, token_type_ids,
    attention_mask and the task's label keys), and whatever else the task keeps to score
    them (SQuAD: the dev questions and their windows)."""

    splits: dict[str, dict[str, np.ndarray]]
    extra: Any = None

    def __getitem__(self, split: str) -> dict[str, np.ndarray]:
        return self.splits[split]

    def __contains__(self, split: str) -> bool:
        return split in self.splits

    @property
    def num_train(self) -> int:
        return len(self.splits["train"]["input_ids"])


class Task:
    """A fine-tuning task; subclass it and register an instance (finetuning.register)."""

    key: str = ""  # the config's name for it (task=KEY), lower case
    name: str = ""  # how folders, records and tables name it (SST-2, SQuAD)
    main_metric: str = ""  # the metric learning rates are chosen by
    metric_names: tuple[str, ...] = ()  # every metric score() returns
    dev_splits: tuple[str, ...] = ("dev",)
    test_splits: tuple[str, ...] = ()  # predicted by the best run, never scored
    label_keys: tuple[str, ...] = ("labels",)  # the batch's targets besides the inputs
    # RUN_DIR/SPLIT_predictions.npy for every split (per-example comparisons of runs);
    # off where the scores are large (SQuAD's per-token logits).
    save_scores: bool = True
    in_all: bool = False  # task=all runs it (the GLUE benchmark's tasks)
    # Errors of a task's data that skip it (recorded as skipped) when several tasks run;
    # with one task they stop the run.
    data_errors: tuple[type[Exception], ...] = ()
    config_fields: Mapping[str, Any] = {}  # field -> default, added to the config
    short_args: Mapping[str, str] = {}  # configs/finetune.py ARG name -> field
    identity_keys: tuple[str, ...] = ()  # config fields a workdir is bound to

    # -- data ---------------------------------------------------------------------------
    def read(self, config) -> Any:
        """Whatever can be read before the model is loaded (default: nothing)."""
        return None

    def encode(self, read: Any, config, tokenizer) -> TaskData:
        raise NotImplementedError

    def load(self, config, tokenizer) -> TaskData:
        """read, then encode."""
        return self.encode(self.read(config), config, tokenizer)

    # -- model, objective, predictions ----------------------------------------------------
    def model(self, model_config) -> Any:
        raise NotImplementedError

    def objective(self) -> Any:
        raise NotImplementedError

    def predict_step(self, model: Any, gather: Callable) -> Callable:
        raise NotImplementedError

    def score(self, data: TaskData, split: str, predictions: np.ndarray,
              run_dir: str) -> dict[str, float]:
        raise NotImplementedError

    # -- results --------------------------------------------------------------------------
    def baselines(self, data: TaskData) -> dict[str, float]:
        """Scores a trivial predictor gets per result column (recorded with the summary)."""
        return {}

    def score_name(self, split: str) -> str:
        """A dev split's column in results (MNLI-m, MNLI-mm; the task's name when it has
        one dev split)."""
        return self.name if len(self.dev_splits) == 1 else f"{self.name}-{split}"

    def scores_line(self, dev: dict[str, dict[str, float]]) -> str:
        """One run's dev scores for its console line."""
        return " ".join(f"{split}:{scores[self.main_metric]:.2f}"
                        for split, scores in dev.items())

    def after_grid(self, summary: Any, data: TaskData, config, workdir: str) -> None:
        """After every run of the grid (the best one is summary's): submissions etc."""

    def no_submission(self, config) -> str:
        """Why the results lack a submission file, if they do (recorded in results.json)."""
        return ""

    def report(self, suite: Any, summary: Any, workdir: str, label: str,
               source: str) -> str:
        """Writes WORKDIR/results.md; returns the table for the console."""
        raise NotImplementedError

    def files_line(self, workdir: str, suite: Any, config, attention: str) -> str:
        """The line after the table: the files written, what to do with them."""
        return ""

    def __repr__(self) -> str:
        return f"<task {self.key}: {self.name}>"
