"""Every result file the project writes, as typed records, and the sweep's layout.

The one owner of these formats: train.py and eval_glue.py write through these
records, scripts/sweep.py and scripts/tables.py read through them, and "is this
step finished?" is decided here for local sweeps and cluster scripts alike.

A pretraining workdir (train.py --workdir):
  config.json             the run's config (training/pretrain.py)
  final_metrics.json      FinalMetrics: step, last train loss, eval_* when there was an
                          eval split; written when the run reached its last step, and
                          valid while checkpoints/STEP, the checkpoint it reports, is there
  diverged.json           Diverged: the step whose loss or gradient was not finite, when
                          a run with nonfinite=error stopped there (nothing checkpointed
                          after it); removed when the run is started again
  environment.json        RunStarts: each start that trained, its step, time and
                          environment (training/run_environment.py)
A GLUE workdir (eval_glue.py --workdir):
  TASK/lr{LR}_seed{S}/result.json   RunResult: one finished (task, lr, seed) run
  results.json            FineTuningResults: init, one TaskSummary per task, skipped tasks,
                          tasks without a submission
  results.md              the task's table (tasks/glue_report.py for GLUE)
A sweep's OUT (scripts/sweep.py --out):
  sweep.json              SweepManifest: grid, rows, seeds, GLUE tasks, arguments
  launch_list.txt         cluster mode: the run scripts, one per line
  data_cache/             tokenizer and packed corpus shared by every run
  jax_cache/              XLA compilation cache shared by every run
  ROW/                    one row (one pretraining seed); with --seeds: ROW/seed{S}/
      run.sh              cluster mode: this run's commands
      pretrain/           a pretraining workdir; train.py's output in train.log
      glue/TASK/          a GLUE workdir for one task; eval_glue.py's output in eval_glue.log

Why one GLUE workdir per task: eval_glue.py takes one task (or all nine) and its
results.json holds the tasks of one invocation, so tasks run one at a time into one
directory would leave only the last one in results.json. Why one data cache:
the tokenizer and packed data are built once for all rows (they are the same for every
row: train_tokenizer is reproducible), not once per run.

Finished, as the sweep decides it (and run.sh asks through this module's command line):

  python -m training.results --is_finished WORKDIR --steps N
      pretraining: WORKDIR/final_metrics.json reports step N and checkpoints/N exists
  python -m training.results --is_finished WORKDIR --task SST-2 --init_step N \\
      --learning_rates 2e-05,3e-05 --seeds 3
      GLUE: WORKDIR/results.json holds the task from checkpoint step N with every
      learning rate and fine-tuning seeds 0..2, and each of those runs has its
      result.json
  python -m training.results --is_diverged WORKDIR
      pretraining: WORKDIR/diverged.json says the run stopped at a non-finite step
  exit status 0: finished (diverged); 1: not (missing, stale or damaged); 2: bad
  arguments.

Reading: `Record.read(directory)` is None when the file is missing and raises
ResultsError (naming the file) when it is damaged; files of older versions of this
code (final_metrics.json without train_loss or step, results.json without skipped
or no_submission) are read with those fields empty. Standard library and numpy only
(glue is imported where a task's metrics are needed), so the command line is quick.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
from typing import Any

from common.files import write_json_atomic

FINAL_METRICS = "final_metrics.json"
DIVERGED = "diverged.json"
RUN_STARTS = "environment.json"
CHECKPOINTS = "checkpoints"  # a pretraining workdir's (training/checkpoints.py)
RUN_CONFIG = "config.json"
RUN_RESULT = "result.json"
RESULTS_JSON = "results.json"
RESULTS_MARKDOWN = "results.md"
# A fine-tuning workdir's: TASK/lr{LR}_seed{S}/model/ (a run's fine-tuned parameters, no
# optimizer state), tokenizer/ (every run's tokenizer) and the pretrained model and
# protocol it belongs to (named when GLUE was the only task; kept so that existing
# workdirs stay checked).
FINE_TUNED_MODEL = "model"
TOKENIZER_DIR = "tokenizer"
FINE_TUNING_IDENTITY = "glue_identity.json"
# How glue_identity.json's "init" names an init=scratch start (then the source it
# borrows the architecture and tokenizer from).
SCRATCH_START = "scratch: architecture and tokenizer of "

MANIFEST = "sweep.json"
LAUNCH_LIST = "launch_list.txt"
DATA_CACHE = "data_cache"
JAX_CACHE = "jax_cache"
RUN_SCRIPT = "run.sh"
PRETRAIN_DIR = "pretrain"
GLUE_DIR = "glue"
PRETRAIN_LOG = "train.log"
GLUE_LOG = "eval_glue.log"
SEED_DIR = re.compile(r"seed(\d+)")


class ResultsError(ValueError):
    """A result file that exists but cannot be read as its record."""


def read_json(path: str) -> Any:
    """The file's JSON; None when it is missing; ResultsError when it is damaged."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ResultsError(f"{path}: cannot be read ({e})") from None


def _finite(value: float | None) -> float | None:
    """JSON has no NaN or Infinity: a non-finite number is recorded as null."""
    return value if value is None or math.isfinite(value) else None


def _read(cls, path: str):
    value = read_json(path)
    if value is None:
        return None
    try:
        return cls.from_json(value)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ResultsError(f"{path}: not a {cls.__name__} ({type(e).__name__}: {e})") from None


# -- pretraining ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class FinalMetrics:
    """WORKDIR/final_metrics.json: written once, when pretraining reached its last step."""

    step: int | None  # None only in files of the first versions of this code
    # The last logged train MLM loss; None when it was not finite (a skipped update's).
    train_loss: float | None = None
    eval: dict[str, float] = dataclasses.field(default_factory=dict)  # eval_loss,
    # eval_accuracy, eval_perplexity of the last eval; empty when there was no eval split
    skipped_nonfinite: int = 0  # updates dropped by nonfinite=skip over the whole run

    @staticmethod
    def path(workdir: str) -> str:
        return os.path.join(workdir, FINAL_METRICS)

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, **{k: _finite(v) for k, v in self.eval.items()},
                "train_loss": _finite(self.train_loss),
                "skipped_nonfinite": self.skipped_nonfinite}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> FinalMetrics:
        step = value.get("step")
        loss = value.get("train_loss")
        return cls(None if step is None else int(step), None if loss is None else float(loss),
                   {k: float(v) for k, v in value.items()
                    if k.startswith("eval_") and v is not None},
                   int(value.get("skipped_nonfinite", 0)))

    def write(self, workdir: str) -> None:
        write_json_atomic(self.path(workdir), self.to_json())

    @classmethod
    def read(cls, workdir: str) -> FinalMetrics | None:
        return _read(cls, cls.path(workdir))

    def holds(self, workdir: str) -> bool:
        """The record vouches for checkpoints/STEP: False once that checkpoint is gone
        (deleted, or set aside as damaged), and the run is then not finished."""
        return self.step is not None and os.path.isdir(
            os.path.join(workdir, CHECKPOINTS, str(self.step)))

    @classmethod
    def set_aside_if_stale(cls, workdir: str) -> str | None:
        """Renames a final_metrics.json that no longer holds (its checkpoint is gone) to
        final_metrics.stale-TIME.json, so nothing reads the run as finished while it
        trains that step again; returns the new name. A damaged file is left for the run's
        end to replace."""
        final = read_quietly(cls, workdir)
        if final is None or final.holds(workdir):
            return None
        import time

        target = os.path.join(workdir, f"final_metrics.stale-{time.strftime('%Y%m%d-%H%M%S')}"
                                       f".json")
        os.replace(cls.path(workdir), target)
        return target

    def metric(self, key: str) -> float | None:
        """train_loss or an eval_* value; None when the run has none."""
        return self.train_loss if key == "train_loss" else self.eval.get(key)


@dataclasses.dataclass(frozen=True)
class Diverged:
    """WORKDIR/diverged.json: a run with nonfinite=error stopped at a non-finite step.
    Rerunning it resumes from the last checkpoint and, the steps being deterministic,
    stops there again; a rate grid reads it as a finished run with the worst loss."""

    step: int  # the first step whose loss or gradient was not finite
    seen_at: int  # the step at which the loop read it (a log step, at most that later)

    @staticmethod
    def path(workdir: str) -> str:
        return os.path.join(workdir, DIVERGED)

    def write(self, workdir: str) -> None:
        write_json_atomic(self.path(workdir), dataclasses.asdict(self))

    @classmethod
    def read(cls, workdir: str) -> Diverged | None:
        return _read(cls, cls.path(workdir))

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Diverged:
        return cls(int(value["step"]), int(value["seen_at"]))


@dataclasses.dataclass(frozen=True)
class RunStarts:
    """WORKDIR/environment.json: one entry per start that trained (a fresh start, then
    each resume), {"step": the step it started from, "time": UTC, "environment": the
    fields of training/run_environment.describe()}, oldest first."""

    starts: tuple[dict[str, Any], ...] = ()

    @staticmethod
    def path(workdir: str) -> str:
        return os.path.join(workdir, RUN_STARTS)

    def to_json(self) -> dict[str, Any]:
        return {"starts": list(self.starts)}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> RunStarts:
        starts = tuple(value["starts"])
        for start in starts:
            int(start["step"]), dict(start["environment"])  # each entry must have both
        return cls(starts)

    @classmethod
    def read(cls, workdir: str) -> RunStarts | None:
        return _read(cls, cls.path(workdir))

    def with_start(self, step: int, time_utc: str, environment: dict[str, str]) -> RunStarts:
        return RunStarts((*self.starts, {"step": step, "time": time_utc,
                                         "environment": environment}))

    def write(self, workdir: str) -> None:
        write_json_atomic(self.path(workdir), self.to_json())


# -- fine-tuning -------------------------------------------------------------------------------
def run_name(learning_rate: float, seed: int) -> str:
    """TASK/<this>/: one (learning rate, seed) run's directory in a fine-tuning workdir."""
    return f"lr{learning_rate:g}_seed{seed}"


@dataclasses.dataclass(frozen=True)
class RunResult:
    """TASK/lr{LR}_seed{S}/result.json: one finished fine-tuning run."""

    task: str
    learning_rate: float
    seed: int
    steps: int
    dev: dict[str, dict[str, float]]  # dev split -> metric -> value
    main: float  # the task's main metric, mean over its dev splits
    final_train_loss: float | None

    @staticmethod
    def path(run_dir: str) -> str:
        return os.path.join(run_dir, RUN_RESULT)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> RunResult:
        return cls(**{f.name: value[f.name] for f in dataclasses.fields(cls)})

    def write(self, run_dir: str) -> None:
        write_json_atomic(self.path(run_dir), self.to_json())

    @classmethod
    def read(cls, run_dir: str) -> RunResult | None:
        return _read(cls, cls.path(run_dir))


@dataclasses.dataclass(frozen=True)
class Score:
    mean: float
    std: float  # over seeds (ddof=1); 0.0 with one seed
    per_seed: list[float]  # in the order of TaskSummary.seeds


@dataclasses.dataclass(frozen=True)
class TaskSummary:
    """One task in results.json: the learning rate with the best mean main dev score
    over seeds, and every score there."""

    task: str
    best_learning_rate: float
    seeds: list[int]
    scores: dict[str, Score]  # "SCORE_NAME/METRIC", e.g. "MNLI-m/accuracy"
    main: dict[str, float]  # score name (SST-2, MNLI-m, MNLI-mm) -> mean main score
    learning_rate_means: dict[str, float]  # str(lr) -> mean main score over seeds
    best_run: int  # the seed of the best run at the best learning rate
    # score name -> main dev score of always predicting the majority training label
    # (glue.metrics.majority_baseline); empty in files written before it was recorded
    majority: dict[str, float] = dataclasses.field(default_factory=dict)
    # The main metric of a plug-in task (finetuning/registry.py), which readers cannot look
    # up by name; "" (and not written) for GLUE's tasks and SQuAD, whose files keep their
    # layout.
    metric: str = ""

    @classmethod
    def from_runs(cls, task: Any, runs: list[RunResult],
                  majority: dict[str, float] | None = None) -> TaskSummary:
        """`task`: a finetuning.Task (or a glue.GlueTask, squad.TASK). Learning rates are
        ranked by their mean main score; ties go to the one run first."""
        by_lr: dict[float, list[RunResult]] = {}
        for run in runs:
            by_lr.setdefault(run.learning_rate, []).append(run)
        best_lr = max(by_lr, key=lambda lr: _mean([r.main for r in by_lr[lr]]))
        best = sorted(by_lr[best_lr], key=lambda r: r.seed)
        scores = {}
        for split in task.dev_splits:
            name = score_name(task, split)
            for metric in task.metric_names:
                values = [r.dev[split][metric] for r in best]
                scores[f"{name}/{metric}"] = Score(
                    _mean(values), _std(values) if len(values) > 1 else 0.0, values)
        return cls(
            task=task.name, best_learning_rate=best_lr, seeds=[r.seed for r in best],
            scores=scores,
            main={score_name(task, s): _mean([r.dev[s][task.main_metric] for r in best])
                  for s in task.dev_splits},
            learning_rate_means={str(lr): _mean([r.main for r in rs])
                                 for lr, rs in sorted(by_lr.items())},
            best_run=max(best, key=lambda r: r.main).seed,
            majority=dict(majority or {}),
            metric="" if _known_task(task.name) else task.main_metric,
        )

    def to_json(self) -> dict[str, Any]:
        value = dataclasses.asdict(self)
        if not value["metric"]:
            del value["metric"]
        return value

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> TaskSummary:
        fields = {f.name: value[f.name] for f in dataclasses.fields(cls)
                  if f.name in value or (f.default_factory is dataclasses.MISSING
                                         and f.default is dataclasses.MISSING)}
        fields["scores"] = {k: Score(**v) for k, v in value["scores"].items()}
        return cls(**fields)

    def at_or_below_majority(self, name: str) -> bool:
        return name in self.majority and self.main[name] <= self.majority[name] + 1e-9

    def learning_rates(self) -> set[float]:
        return {float(lr) for lr in self.learning_rate_means}

    def main_metric(self) -> str:
        """A plug-in task's as recorded; GLUE's and SQuAD's by the task's name."""
        return self.metric or fine_tuning_task(self.task).main_metric

    def main_score(self, name: str) -> Score:
        """The main metric's Score of one score name (e.g. MNLI-mm)."""
        return self.scores[f"{name}/{self.main_metric()}"]

    def main_per_seed(self) -> dict[str, dict[int, float]]:
        """{score name: {fine-tuning seed: main metric}} at the best learning rate."""
        out = {}
        for name in self.main:
            per_seed = self.main_score(name).per_seed
            out[name] = {int(s): float(v) for s, v in zip(self.seeds, per_seed, strict=True)}
        return out


@dataclasses.dataclass
class FineTuningResults:
    """WORKDIR/results.json of eval_glue.py and eval_squad.py: every task fine-tuned in
    this workdir."""

    init: str  # the pretrained model: PRETRAIN_WORKDIR@STEP or hf:NAME
    tasks: dict[str, TaskSummary] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)  # task -> why
    no_submission: dict[str, str] = dataclasses.field(default_factory=dict)  # task -> why

    @staticmethod
    def path(workdir: str) -> str:
        return os.path.join(workdir, RESULTS_JSON)

    def to_json(self) -> dict[str, Any]:
        return {"init": self.init, "tasks": {k: v.to_json() for k, v in self.tasks.items()},
                "skipped": dict(self.skipped), "no_submission": dict(self.no_submission)}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> FineTuningResults:
        return cls(str(value.get("init", "")),
                   {k: TaskSummary.from_json(v) for k, v in value.get("tasks", {}).items()},
                   dict(value.get("skipped", {})), dict(value.get("no_submission", {})))

    def write(self, workdir: str) -> None:
        write_json_atomic(self.path(workdir), self.to_json())

    @classmethod
    def read(cls, workdir: str) -> FineTuningResults | None:
        return _read(cls, cls.path(workdir))

    @classmethod
    def continued(cls, init: str, previous: FineTuningResults | None) -> FineTuningResults:
        """This invocation's results, starting from what earlier ones in the workdir left:
        their tasks, skips and missing submissions stay until a task is run again."""
        if previous is None:
            return cls(init)
        return cls(init, dict(previous.tasks), dict(previous.skipped),
                   dict(previous.no_submission))

    def record(self, task: str, summary: TaskSummary | None = None, skipped: str = "",
               no_submission: str = "") -> None:
        """Task's outcome in this invocation: a summary, or why it was skipped; replaces
        what an earlier invocation said of the task (a skip keeps its earlier scores)."""
        self.skipped.pop(task, None)
        self.no_submission.pop(task, None)
        if summary is not None:
            self.tasks[task] = summary
        if skipped:
            self.skipped[task] = skipped
        if no_submission:
            self.no_submission[task] = no_submission

    def init_step(self) -> int | None:
        """The checkpoint step of `init` (PRETRAIN_WORKDIR@STEP); None for hub models."""
        _, at, step = self.init.rpartition("@")
        return int(step) if at and step.isdigit() else None


def fine_tuning_task(name: str) -> Any:
    """The task a results.json names: squad.TASK or a glue.GlueTask."""
    import squad

    if name == squad.TASK.name:
        return squad.TASK
    import glue

    return glue.get_task(name)


def _known_task(name: str) -> bool:
    """GLUE's tasks and SQuAD: readers look their main metric up by name."""
    try:
        fine_tuning_task(name)
    except ValueError:
        return False
    return True


def score_name(task: Any, split: str) -> str:
    """A result's column name: the task's own (finetuning.Task.score_name: MNLI-m,
    MNLI-mm, SST-2, SQuAD), glue.score_name for a glue.GlueTask, else the task's name."""
    if hasattr(task, "score_name"):
        return task.score_name(split)
    import glue

    return glue.score_name(task, split) if isinstance(task, glue.GlueTask) else task.name


def _mean(values: list[float]) -> float:
    import numpy as np

    return float(np.mean(values))


def _std(values: list[float]) -> float:
    import numpy as np

    return float(np.std(values, ddof=1))


# -- finished? ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PretrainTarget:
    """A pretraining workdir is finished when final_metrics.json reports `steps`."""

    workdir: str
    steps: int

    @property
    def marker(self) -> str:
        return FinalMetrics.path(self.workdir)

    def finished(self) -> bool:
        try:
            final = FinalMetrics.read(self.workdir)
        except ResultsError:
            return False  # rerun: train.py resumes and rewrites it
        return final is not None and final.step == self.steps and final.holds(self.workdir)

    def cli_args(self) -> list[str]:
        return ["--is_finished", self.workdir, "--steps", str(self.steps)]


@dataclasses.dataclass(frozen=True)
class GlueTarget:
    """A GLUE workdir is finished for `task` when results.json holds it, from the
    checkpoint at `init_step`, with every learning rate and seeds 0..num_seeds-1."""

    workdir: str
    task: str
    init_step: int
    learning_rates: tuple[float, ...]
    num_seeds: int

    @property
    def marker(self) -> str:
        return FineTuningResults.path(self.workdir)

    def finished(self) -> bool:
        try:
            results = FineTuningResults.read(self.workdir)
        except ResultsError:
            return False
        if results is None or results.init_step() != self.init_step:
            return False
        summary = results.tasks.get(self.task)
        if summary is None:
            return False
        if not (set(self.learning_rates) <= summary.learning_rates()
                and set(range(self.num_seeds)) <= set(summary.seeds)):
            return False
        # results.json sums up the runs' result.json files; a run whose file is gone
        # (deleted, or never written by a copy) is redone by eval_glue.py.
        return all(os.path.isfile(RunResult.path(os.path.join(
            self.workdir, self.task, run_name(lr, seed))))
            for lr in self.learning_rates for seed in range(self.num_seeds))

    def cli_args(self) -> list[str]:
        return ["--is_finished", self.workdir, "--task", self.task,
                "--init_step", str(self.init_step),
                "--learning_rates", ",".join(repr(float(lr)) for lr in self.learning_rates),
                "--seeds", str(self.num_seeds)]


@dataclasses.dataclass(frozen=True)
class DivergedTarget:
    """A pretraining workdir that stopped at a non-finite step (its diverged.json)."""

    workdir: str

    def finished(self) -> bool:
        return read_quietly(Diverged, self.workdir) is not None


def target_from_args(argv: list[str]) -> PretrainTarget | GlueTarget | DivergedTarget:
    """The target of `cli_args()`; argparse's SystemExit(2) on bad arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m training.results",
        description="Exit 0 if a pretraining or GLUE workdir is finished (a pretraining "
                    "diverged, with --is_diverged), 1 if not.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--is_finished", metavar="WORKDIR")
    which.add_argument("--is_diverged", metavar="WORKDIR")
    parser.add_argument("--steps", type=int, help="pretraining: the step to have reached")
    parser.add_argument("--task", help="GLUE: the task (as results.json names it)")
    parser.add_argument("--init_step", type=int, help="GLUE: the checkpoint step")
    parser.add_argument("--learning_rates", default="", help="GLUE: comma list")
    parser.add_argument("--seeds", type=int, help="GLUE: fine-tuning seeds 0..N-1")
    args = parser.parse_args(argv)
    if args.is_diverged is not None:
        return DivergedTarget(args.is_diverged)
    if args.task is None:
        if args.steps is None:
            parser.error("give --steps (pretraining) or --task (GLUE)")
        return PretrainTarget(args.is_finished, args.steps)
    if args.init_step is None or args.seeds is None:
        parser.error("--task needs --init_step and --seeds")
    try:
        rates = tuple(float(x) for x in args.learning_rates.split(",") if x.strip())
    except ValueError:
        parser.error(f"--learning_rates={args.learning_rates}: numbers, comma-separated")
    return GlueTarget(args.is_finished, args.task, args.init_step, rates, args.seeds)


# -- a sweep's layout -----------------------------------------------------------------------
def run_dir(out: str, row: str, seed: int | None) -> str:
    """OUT/ROW for a sweep without --seeds, OUT/ROW/seed{S} with them."""
    base = os.path.join(out, row)
    return base if seed is None else os.path.join(base, f"seed{seed}")


def pretrain_dir(directory: str) -> str:
    return os.path.join(directory, PRETRAIN_DIR)


def glue_dir(directory: str, task: str) -> str:
    return os.path.join(directory, GLUE_DIR, task)


def read_quietly(record, directory: str):
    """record.read(directory), with a damaged file read as missing (tables, listings)."""
    try:
        return record.read(directory)
    except ResultsError:
        return None


def read_run_config(workdir: str) -> dict[str, Any] | None:
    """A pretraining workdir's config.json (a ConfigDict's dict); None if missing/damaged."""
    try:
        return read_json(os.path.join(workdir, RUN_CONFIG))
    except ResultsError:
        return None


def list_runs(out: str, row: str) -> list[tuple[int | None, str]]:
    """(pretraining seed, run directory) of a row's runs, in both layouts, by seed.

    A run without a seed folder reports the seed in its config.json (None when it
    has none yet), so it pairs with seed folders of other rows by seed id.
    """
    base = os.path.join(out, row)
    if not os.path.isdir(base):
        return []
    runs: dict[int | None, str] = {}
    if os.path.isdir(pretrain_dir(base)) or os.path.isdir(os.path.join(base, GLUE_DIR)):
        config = read_run_config(pretrain_dir(base)) or {}
        runs[config.get("seed")] = base
    for entry in os.listdir(base):
        match = SEED_DIR.fullmatch(entry)
        if match and os.path.isdir(os.path.join(base, entry)):
            runs[int(match.group(1))] = os.path.join(base, entry)
    return sorted(runs.items(), key=lambda item: (item[0] is None, item[0] or 0))


def run_glue_tasks(directory: str) -> dict[str, TaskSummary]:
    """Task name -> summary from every results.json of a run directory: glue/TASK/ (the
    sweep's layout) and glue/ (one eval_glue.py invocation for several tasks); a task in
    two files keeps the newer file's."""
    root = os.path.join(directory, GLUE_DIR)
    paths = [root]
    if os.path.isdir(root):
        paths += [os.path.join(root, d) for d in sorted(os.listdir(root))]
    found = [(os.path.getmtime(FineTuningResults.path(p)), p) for p in paths
             if os.path.isfile(FineTuningResults.path(p))]
    tasks: dict[str, TaskSummary] = {}
    for _, workdir in sorted(found):
        results = read_quietly(FineTuningResults, workdir)
        if results is not None:
            tasks.update(results.tasks)
    return tasks


@dataclasses.dataclass
class SweepManifest:
    """OUT/sweep.json: what the sweeps into OUT launched; tables.py reads its rows."""

    grid: str  # a grid's name or a grid file's path
    rows: list[dict[str, Any]]  # configs.grids.Row as dicts: name, overrides, reported
    seeds: list[int] = dataclasses.field(default_factory=list)
    glue_tasks: list[str] = dataclasses.field(default_factory=list)
    pretrain_args: str = ""
    pretrain_overrides: list[str] = dataclasses.field(default_factory=list)
    glue_args: str = ""
    glue_overrides: list[str] = dataclasses.field(default_factory=list)
    glue_dir: str | None = None

    @staticmethod
    def path(out: str) -> str:
        return os.path.join(out, MANIFEST)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> SweepManifest:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in value.items() if k in names})

    def write(self, out: str) -> None:
        write_json_atomic(self.path(out), self.to_json())

    @classmethod
    def read(cls, out: str) -> SweepManifest | None:
        return _read(cls, cls.path(out))

    def merged_into(self, old: SweepManifest | None) -> SweepManifest:
        """This sweep's manifest keeping an earlier one's rows, seeds and tasks, so that a
        grid can be extended by later sweeps into the same OUT."""
        if old is None:
            return self
        rows = {r["name"]: r for r in old.rows} | {r["name"]: r for r in self.rows}
        return dataclasses.replace(
            self, rows=list(rows.values()), seeds=sorted({*old.seeds, *self.seeds}),
            glue_tasks=list(dict.fromkeys([*old.glue_tasks, *self.glue_tasks])))


# -- command line ---------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    target = target_from_args(sys.argv[1:] if argv is None else argv)
    return 0 if target.finished() else 1


if __name__ == "__main__":
    sys.exit(main())
