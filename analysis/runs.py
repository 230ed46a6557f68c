"""A sweep's results as read from its folders: every row's seeds, their pretraining and
fine-tuning scores, the model's size and cost, and the metrics a table shows.

Rows come from --grid/--grid_file, else from the sweep's OUT/sweep.json, else
from every row folder in OUT (layout: training/results.py). Per row: parameters
(without the MLM head, at the run's vocabulary), forward GFLOPs per token, MLM
dev loss and accuracy (pretrain/final_metrics.json), every GLUE task's main dev
score at the best learning rate (glue/TASK/results.json) and their average;
each as mean ± std
  - over pretraining seeds when the row has two or more (a seed's GLUE score is
    its mean over fine-tuning seeds), or
  - over fine-tuning seeds when it has one pretraining seed (MLM: no spread).
The papers' grids get the paper's numbers beside ours.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

import glue
from analysis import sweep_grids
from configs import grids
from training.results import (
    FINAL_METRICS,
    FinalMetrics,
    SweepManifest,
    list_runs,
    pretrain_dir,
    read_quietly,
    read_run_config,
    run_dir,
    run_glue_tasks,
)

# Paper number -> (its column, the column of ours it stands beside; None: at the end).
PAPER_COLUMNS = {"params_m": ("params (paper)", "params @30522"),
                 "mnli": ("MNLI (paper)", "MNLI-m"),
                 "squad_f1": ("SQuAD F1 (paper)", "SQuAD F1")}
# SQuAD's score names in a run's results (F1 is its results.json main score) and columns;
# neither is part of the GLUE average.
SQUAD_F1, SQUAD_EM = "SQuAD", "SQuAD EM"
COLUMN_NAMES = {SQUAD_F1: "SQuAD F1"}
NOT_AVERAGED = {"WNLI", SQUAD_F1, SQUAD_EM}
PAPER_VOCAB = 30522  # the papers count parameters with BERT's vocabulary


# -- reading runs ------------------------------------------------------------------------
@dataclasses.dataclass
class SeedRun:
    """One pretraining seed of a row, with its GLUE results."""

    seed: int | None
    directory: str
    pretrain: str  # its pretraining workdir (a pretrained_by row's is its source's)
    mlm: FinalMetrics | None  # pretrain/final_metrics.json; None until pretraining finished
    glue: dict[str, dict[int, float]]  # score name -> {fine-tuning seed: main dev score}
    config: dict[str, Any] | None  # pretrain/config.json
    # The fine-tuning learning rate its GLUE scores come from (None: none yet, or tasks
    # at different rates).
    glue_lr: float | None = None
    # steps_to column name -> first step at its level (None: never); read once by collect
    reached: dict[str, float | None] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RowResult:
    row: grids.Row
    runs: list[SeedRun]
    model: Any = None  # models.ModelConfig of the row (None if it cannot be built)
    seq_len: int | None = None
    params: int | None = None  # without the MLM head, at the run's vocabulary
    params_paper_vocab: int | None = None
    flops: float | None = None  # forward encoder FLOPs per token

    def seeds(self) -> list[int | None]:
        return [r.seed for r in self.runs]

    def run(self, seed: int | None) -> SeedRun:
        return next(r for r in self.runs if r.seed == seed)


def read_glue(run_directory: str) -> tuple[dict[str, dict[int, float]], float | None]:
    """(score name -> {fine-tuning seed: main score at the best learning rate}, that
    learning rate when every task shares it) from every results.json of a run (MNLI:
    -m and -mm)."""
    scores: dict[str, dict[int, float]] = {}
    summaries = run_glue_tasks(run_directory).values()
    for summary in summaries:
        scores.update(summary.main_per_seed())
        em = summary.scores.get(f"{SQUAD_F1}/exact_match")
        if summary.task == SQUAD_F1 and em is not None:
            scores[SQUAD_EM] = {int(s): float(v)
                                for s, v in zip(summary.seeds, em.per_seed, strict=True)}
    rates = {summary.best_learning_rate for summary in summaries}
    return scores, rates.pop() if len(rates) == 1 else None


def from_scratch(row: grids.Row) -> bool:
    """Fine-tuned without pretraining: its checkpoint gives the architecture only, so its
    MLM numbers (and steps_to) are not the row's and stay empty."""
    return row.glue.get("init") == "scratch"


def read_row(out: str, row: grids.Row) -> RowResult:
    scratch = from_scratch(row)
    runs = []
    for seed, directory in list_runs(out, row.name):
        pretrain = pretrain_dir(run_dir(out, row.pretrained_by, seed) if row.pretrained_by
                                else directory)
        mlm = None if scratch else read_quietly(FinalMetrics, pretrain)
        scores, lr = read_glue(directory)
        runs.append(SeedRun(seed, directory, pretrain, mlm, scores, read_run_config(pretrain),
                            glue_lr=lr))
    return RowResult(row, runs)


def vocabulary_source(data: Any) -> str:
    """What fixes a run's vocabulary: its corpus, tokenizer and requested size (the
    tokenizer trained on a small corpus can be smaller than requested)."""
    return json.dumps([data.get(k) for k in ("corpus", "tokenizer", "vocab_size")])


def trained_vocabularies(results: list[RowResult]) -> dict[str, int]:
    """vocabulary_source -> the vocabulary its runs trained, where they agree."""
    found: dict[str, set[int]] = {}
    for run in (run for result in results for run in result.runs if run.config):
        try:
            found.setdefault(vocabulary_source(run.config["data"]), set()).add(
                int(run.config["model"]["vocab_size"]))
        except (KeyError, TypeError, ValueError):
            continue
    return {source: sizes.pop() for source, sizes in found.items() if len(sizes) == 1}


def add_model_stats(result: RowResult, manifest: SweepManifest | None,
                    paper_vocab: bool, trained_vocab: dict[str, int] | None = None) -> None:
    """Model, parameters and FLOPs: from a run's config.json (what was trained, with
    the tokenizer's vocabulary), else built from the row as the sweep would, at the
    vocabulary other runs on the same data trained (trained_vocab), else the requested
    one."""
    from models import ModelConfig

    config = next((r.config for r in result.runs if r.config), None)
    if config is None and not result.row.overrides:
        return  # a folder found by scanning OUT, not run yet: nothing says what it is
    try:
        if config is not None:
            model = ModelConfig.from_config(config["model"])
            seq_len = int(config["data"]["max_seq_length"])
        else:
            built = sweep_grids.pretrain_config(
                sweep_grids.join_args(sweep_grids.row_arg(result.row),
                                      manifest.pretrain_args if manifest else ""),
                list(manifest.pretrain_overrides) if manifest else [])
            model = ModelConfig.from_config(built.model)
            model = model.replace(vocab_size=(trained_vocab or {}).get(
                vocabulary_source(built.data), built.data.vocab_size))
            seq_len = built.data.max_seq_length
        model = as_fine_tuned(model, result.row, manifest)
    except (ValueError, KeyError, TypeError):  # a row folder without a usable config
        return
    result.model, result.seq_len = model, seq_len
    result.params = sweep_grids.parameter_counts(model)[0]
    if paper_vocab:  # without the MLM head only the word embeddings depend on the vocabulary
        result.params_paper_vocab = (result.params
                                     + (PAPER_VOCAB - model.vocab_size) * model.hidden_size)
    result.flops = sweep_grids.flops_per_token(model, seq_len)


def as_fine_tuned(model: Any, row: Any, manifest: SweepManifest | None) -> Any:
    """The model a row fine-tunes: its checkpoint's, or with a variant inserted (e.g.
    insert_th: talking heads), which costs more parameters and FLOPs than the checkpoint."""
    from configs import glue as glue_configs
    from finetuning.pretrained import inserted_config, insertion_asked

    glue = glue_configs.get_config(
        sweep_grids.glue_arg(row, manifest.glue_args if manifest else ""))
    asked = insertion_asked(glue)
    if not asked:
        return model
    return inserted_config(asked[0], model, row.name, asked[1])


SWEEP_LAYOUT = ("tables.py reads a sweep's OUT: OUT/ROW/pretrain/ and OUT/ROW/glue/TASK/ "
                "(or OUT/ROW/seedS/...), as scripts/sweep.py writes it, or one ROW folder")


def row_folders(out: str) -> list[str]:
    return sorted(d for d in os.listdir(out) if list_runs(out, d))


def what_is_here(out: str) -> str:
    """The one error line for an --out that holds no row: what the folder is instead."""
    if os.path.exists(os.path.join(out, FINAL_METRICS)) or os.path.isdir(
            os.path.join(out, "checkpoints")):
        found = f"a pretraining workdir (train.py; its numbers: {out}/{FINAL_METRICS})"
    elif os.path.exists(os.path.join(out, "results.json")):
        found = f"an eval_glue.py workdir (its table: {out}/results.md)"
    elif os.path.exists(os.path.join(out, "table.md")):
        found = f"tables already written ({out}/table.md)"
    else:
        found = "no run"
    return f"--out={out} holds {found}; {SWEEP_LAYOUT}"


def rows_location(out: str, grid: str | None, grid_file: str | None) -> tuple[str, str | None]:
    """(the folder whose subfolders are rows, the one row to read or None for all): OUT
    itself, or its parent when OUT is one row's folder."""
    if grid or grid_file or read_quietly(SweepManifest, out) or row_folders(out):
        return out, None
    parent, name = os.path.split(os.path.abspath(out))
    if list_runs(parent, name):
        return parent, name
    raise ValueError(what_is_here(out))


def load_rows(out: str, grid: str | None, grid_file: str | None,
              only: str | None = None) -> tuple[str, list[grids.Row], SweepManifest | None]:
    """(label, rows, the sweep's manifest): --grid/--grid_file, else the manifest's rows,
    else every folder of OUT that holds a run (or the one named `only`)."""
    manifest = read_quietly(SweepManifest, out)
    if grid or grid_file:
        label, rows = sweep_grids.load_grid(grid, grid_file)
        return label, rows, manifest
    if manifest and manifest.rows:
        rows = [sweep_grids.row_from_json(r) for r in manifest.rows]
        rows = [r for r in rows if only in (None, r.name)]
        return manifest.grid, rows, manifest
    names = [only] if only else row_folders(out)
    return os.path.join(out, only) if only else out, [grids.Row(n, {}) for n in names], manifest


# -- metrics and their values ------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Metric:
    name: str  # column name
    kind: str  # mlm | task | average | steps_to
    key: str = ""  # final_metrics.json key (mlm), GLUE score name (task), scalar (steps_to)
    higher_is_better: bool = True
    scale: float = 1.0
    digits: int = 1
    threshold: float | None = None  # steps_to: the level the scalar must reach
    at_least: bool = True  # steps_to: reach means >= threshold (else <=)
    # Equivalence margin: a pair whose whole 95% t interval of B - A lies inside
    # (-margin, +margin) is called equivalent; None: never (steps_to). 0.5 points: the
    # papers' effect sizes (the low-rank paper's Table 1 differences are about 0.5).
    margin: float | None = 0.5


def parse_steps_to(spec: str) -> Metric:
    """'eval_accuracy>=0.99' -> the steps_to metric (lower is better)."""
    for op, at_least in ((">=", True), ("<=", False)):
        tag, sep, value = spec.partition(op)
        if sep and tag.strip():
            try:
                threshold = float(value)
            except ValueError:
                break
            return Metric(f"steps to {tag.strip()}{op}{threshold:g}", "steps_to", tag.strip(),
                          higher_is_better=False, digits=0, threshold=threshold,
                          at_least=at_least, margin=None)
    raise ValueError(f"--steps_to {spec!r}: use TAG>=VALUE or TAG<=VALUE, "
                     f"e.g. eval_accuracy>=0.99")


def first_step_reaching(curve: dict[int, float], metric: Metric) -> float | None:
    """The first logged step at which the scalar reached the threshold; None: never."""
    for step in sorted(curve):
        value = curve[step]
        if (value >= metric.threshold) if metric.at_least else (value <= metric.threshold):
            return float(step)
    return None


MLM_METRICS = (
    Metric("MLM loss", "mlm", "eval_loss", higher_is_better=False, digits=3, margin=0.02),
    Metric("MLM acc", "mlm", "eval_accuracy", scale=100.0, digits=1),
)


def task_order(names: set[str]) -> list[str]:
    """The BERT paper's column order, then the rest (WNLI)."""
    known = [n for n in glue.metrics.BERT_AVERAGE_ENTRIES if n in names]
    return known + sorted(names - set(known))


def build_metrics(results: list[RowResult]) -> tuple[list[Metric], list[str]]:
    """(columns, the tasks averaged). The average covers the tasks every row with
    GLUE results has, so that rows are compared on the same tasks; WNLI is left
    out as in the BERT paper."""
    per_row = [set().union(*(r.glue for r in rr.runs)) for rr in results]
    with_glue = [tasks for tasks in per_row if tasks]
    tasks = task_order(set().union(*with_glue)) if with_glue else []
    # Only GLUE's tasks are averaged (not WNLI, SQuAD or a plug-in task's columns).
    glue_columns = {glue.score_name(t, split) for t in glue.TASKS.values() for split in
                    t.dev_splits}
    common = (set.intersection(*with_glue) & glue_columns) - NOT_AVERAGED \
        if with_glue else set()
    averaged = task_order(common)
    metrics = [*MLM_METRICS, *(Metric(COLUMN_NAMES.get(t, t), "task", t) for t in tasks)]
    if len(averaged) > 1:
        full = set(glue.metrics.BERT_AVERAGE_ENTRIES) <= common
        metrics.append(Metric("GLUE avg" if full else f"Avg ({len(averaged)} tasks)", "average"))
    return metrics, averaged


def average(scores: dict[str, float], tasks: list[str]) -> float:
    if set(glue.metrics.BERT_AVERAGE_ENTRIES) <= set(tasks):
        return glue.glue_average(scores)
    return float(np.mean([scores[t] for t in tasks]))


def pretrain_value(run: SeedRun, metric: Metric, averaged: list[str]) -> float | None:
    """The run's number: MLM as is, GLUE as the mean over fine-tuning seeds, steps_to
    from the pretraining's TensorBoard events (None for a run that never got there)."""
    if metric.kind == "steps_to":
        return run.reached.get(metric.name)
    if metric.kind == "mlm":
        value = run.mlm.metric(metric.key) if run.mlm else None
        return None if value is None else value * metric.scale
    if metric.kind == "task":
        scores = run.glue.get(metric.key)
        return float(np.mean(list(scores.values()))) if scores else None
    if not all(run.glue.get(t) for t in averaged):
        return None
    return average({t: float(np.mean(list(run.glue[t].values()))) for t in averaged}, averaged)


def finetune_values(run: SeedRun, metric: Metric, averaged: list[str]) -> dict[int, float]:
    """{fine-tuning seed: score}; the average only over seeds every averaged task has."""
    if metric.kind == "task":
        return dict(run.glue.get(metric.key, {}))
    if metric.kind == "average" and all(run.glue.get(t) for t in averaged):
        seeds = set.intersection(*(set(run.glue[t]) for t in averaged))
        return {s: average({t: run.glue[t][s] for t in averaged}, averaged)
                for s in sorted(seeds)}
    return {}


@dataclasses.dataclass(frozen=True)
class Stat:
    values: tuple[float, ...]
    over: str  # "pretraining seeds" | "fine-tuning seeds"

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else float("nan")

    @property
    def std(self) -> float:
        return float(np.std(self.values, ddof=1)) if self.n > 1 else float("nan")


def row_stat(result: RowResult, metric: Metric, averaged: list[str]) -> Stat:
    """Spread over pretraining seeds if there are two, else over fine-tuning seeds."""
    values = [(r, pretrain_value(r, metric, averaged)) for r in result.runs]
    values = [(r, v) for r, v in values if v is not None]
    if len(values) == 1 and metric.kind not in ("mlm", "steps_to"):
        scores = finetune_values(values[0][0], metric, averaged)
        if len(scores) > 1:
            return Stat(tuple(scores.values()), "fine-tuning seeds")
    return Stat(tuple(v for _, v in values), "pretraining seeds")


@dataclasses.dataclass
class Table:
    """Everything the outputs are made from."""

    label: str
    results: list[RowResult]
    metrics: list[Metric]
    averaged: list[str]  # the tasks the average column covers

    def stat(self, result: RowResult, metric: Metric) -> Stat:
        return row_stat(result, metric, self.averaged)



def scalar_curve(logdir: str, tag: str) -> dict[int, float]:
    """{step: value} of a TensorBoard scalar; a resumed run's later value wins."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(logdir, size_guidance={"scalars": 0})
    events.Reload()
    if tag not in events.Tags().get("scalars", []):
        return {}
    return {e.step: e.value for e in events.Scalars(tag)}
