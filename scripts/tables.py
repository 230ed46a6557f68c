"""A sweep's results as tables (markdown, CSV), paired significance tests and plots.

  python scripts/tables.py --out runs/th_cpu
  python scripts/tables.py --out runs/t2a --grid lowrank_table2a --format md,csv \
      --plots runs/t2a/plots

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

Significance. Pairs (A, B): --pairs A:B,... given by hand; else every row vs
--baseline when given; else those the grid declares (configs/grids.py: PAIRS);
else multi_head vs each other attention at an otherwise equal model (e.g. talking
heads at the same head count); if there is no such pair, every row vs a baseline
(by default the first row with the standard head size d/h, else the first row),
e.g. each key size vs d/h. A pair with a row that fine-tunes another row's
checkpoint (pretrained_by) tests only fine-tuning scores. Values are paired by seed id:
  - pretraining seed s of A with pretraining seed s of B, when the two share at
    least two: the same seed gives both the same batches, masks and dropout
    stream, so their difference is not confounded by data order;
  - otherwise (one shared pretraining seed) fine-tuning seed s with fine-tuning
    seed s (same classifier init and example order). This measures fine-tuning
    noise only: with one pretraining run per row, pretraining noise is invisible.
Each test reports n, the mean difference B - A with its 95% paired t interval (and
a percentile bootstrap interval from 10 pairs on: below that it undercovers, e.g. it
is [min, max] at n = 3), the paired t-test p (scipy.stats.ttest_rel), the Wilcoxon
signed-rank p (scipy.stats.wilcoxon), and the p of the verdict's test (--test: t by
default, because with fewer than 6 pairs the exact Wilcoxon p cannot fall below
2/2^n) after Holm's correction over every test of the table (one table, one family).
Verdict, one rule: "B better" / "A better" when that corrected p < --alpha;
"equivalent (±m)" when the whole t interval lies inside the metric's margin m (1
point for GLUE scores and MLM accuracy, 0.02 nats for MLM loss); else "not settled".
Beside each pair: parameters and forward GFLOPs per token of A and B, so equal
parameters are not read as equal cost.

Plots (PNG): scores vs number of heads, vs key size and vs the fine-tuning
learning rate (error bars: std; each drawn when some line has two points), and MLM
loss curves per row from the TensorBoard events (mean over seeds).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import sys
import warnings
from typing import Any

import numpy as np
import scipy.stats
from absl import app, flags, logging

import glue
from attention import registry
from common.files import write_text_atomic
from configs import grids
from scripts import sweep_grids
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

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    flags.DEFINE_string("out", None, "the sweep's root directory (scripts/sweep.py --out)")
    flags.DEFINE_string("grid", None, f"rows of configs/grids.py: {', '.join(sorted(grids.GRIDS))}")
    flags.DEFINE_string("grid_file", None, "rows from a grid file (see scripts/sweep_grids.py)")
    flags.DEFINE_list("format", ["md", "csv"], "files to write into --tables_dir: md, csv")
    flags.DEFINE_string("tables_dir", None, "where table.md/table.csv/significance.csv go; "
                        "default: --out")
    flags.DEFINE_string("plots", None, "directory for PNG plots; unset: no plots")
    flags.DEFINE_list("pairs", [], "A:B row pairs to test (B - A); default: see the docstring")
    flags.DEFINE_string("baseline", None, "compare every row with this one")
    flags.DEFINE_enum("test", "t", ["t", "wilcoxon"], "the paired test behind the verdict")
    flags.DEFINE_float("alpha", 0.05, "significance level")
    flags.DEFINE_integer("bootstrap", 10_000, "bootstrap resamples of the seed pairs")
    flags.DEFINE_list("steps_to", [], "TAG>=VALUE or TAG<=VALUE: a column with the first "
                      "pretraining step whose TensorBoard scalar TAG reaches VALUE, e.g. "
                      "eval_accuracy>=0.99 (how fast a row learns, when all end at the same level)")
    flags.mark_flag_as_required("out")


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


def add_model_stats(result: RowResult, manifest: SweepManifest | None,
                    paper_vocab: bool) -> None:
    """Model, parameters and FLOPs: from a run's config.json (what was trained, with
    the tokenizer's vocabulary), else built from the row as the sweep would."""
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
            model = model.replace(vocab_size=built.data.vocab_size)
            seq_len = built.data.max_seq_length
    except (ValueError, KeyError, TypeError):  # a row folder without a usable config
        return
    result.model, result.seq_len = model, seq_len
    result.params = sweep_grids.parameter_counts(model)[0]
    if paper_vocab:  # without the MLM head only the word embeddings depend on the vocabulary
        result.params_paper_vocab = (result.params
                                     + (PAPER_VOCAB - model.vocab_size) * model.hidden_size)
    result.flops = sweep_grids.flops_per_token(model, seq_len)


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
    # (-margin, +margin) is called equivalent; None: never (steps_to).
    margin: float | None = 1.0


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
    Metric("MLM acc", "mlm", "eval_accuracy", scale=100.0, digits=1, margin=1.0),
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
    common = set.intersection(*with_glue) - NOT_AVERAGED if with_glue else set()
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


# -- paired tests ------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PairedTest:
    metric: Metric
    a: str
    b: str
    over: str
    seeds: tuple[int | None, ...]
    values_a: tuple[float, ...]
    values_b: tuple[float, ...]
    p_t: float
    p_wilcoxon: float
    ci: tuple[float, float]  # 95% paired t interval of mean(B - A)
    ci_bootstrap: tuple[float, float] | None  # percentile bootstrap; None below MIN_BOOTSTRAP_N
    cost_a: tuple[int | None, float | None] = (None, None)  # (parameters, forward FLOPs/token)
    cost_b: tuple[int | None, float | None] = (None, None)
    # p of the verdict's test after Holm's correction over the table's family of tests
    # (set by run_tests; nan when the test has no p)
    p_holm: float = float("nan")

    @property
    def diff(self) -> float:
        return float(np.mean(np.subtract(self.values_b, self.values_a)))

    def p(self, test: str) -> float:
        return self.p_t if test == "t" else self.p_wilcoxon

    def verdict(self, test: str, alpha: float) -> str:
        """The one rule (module docstring): better when Holm's p < alpha; equivalent when
        the t interval lies inside the metric's margin; else not settled."""
        del test  # p_holm was computed from the chosen test
        lo, hi = self.ci
        if self.p_holm < alpha:
            return f"{self.b if (self.diff > 0) == self.metric.higher_is_better else self.a} better"
        margin = self.metric.margin
        if margin is not None and -margin < lo and hi < margin:
            return f"equivalent (±{margin:g})"
        return "not settled"


# Below this many pairs the percentile bootstrap undercovers (at n = 3 its 95% interval
# is [min, max] of the differences, about 75% coverage): only the t interval is shown.
MIN_BOOTSTRAP_N = 10


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (nan stays nan and is not counted): controls
    the family-wise error rate over the tests of one table."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if not np.isnan(p))
    adjusted = [float("nan")] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p))
        adjusted[i] = running
    return adjusted


def paired_values(a: RowResult, b: RowResult, metric: Metric, averaged: list[str]
                  ) -> tuple[str, list[Any], list[float], list[float]]:
    """(what is paired, seed ids, A's values, B's values), paired by seed id."""
    common = [s for s in a.seeds() if s in b.seeds()]
    by_pretrain = [(s, pretrain_value(a.run(s), metric, averaged),
                    pretrain_value(b.run(s), metric, averaged)) for s in common]
    by_pretrain = [x for x in by_pretrain if x[1] is not None and x[2] is not None]
    if len(by_pretrain) >= 2 or metric.kind in ("mlm", "steps_to") or not by_pretrain:
        seeds, va, vb = zip(*by_pretrain, strict=True) if by_pretrain else ((), (), ())
        return "pretraining seeds", list(seeds), list(va), list(vb)
    seed = by_pretrain[0][0]
    fa = finetune_values(a.run(seed), metric, averaged)
    fb = finetune_values(b.run(seed), metric, averaged)
    ids = sorted(set(fa) & set(fb))
    return (f"fine-tuning seeds (pretraining seed {seed})", ids, [fa[i] for i in ids],
            [fb[i] for i in ids])


def paired_test(metric: Metric, a: str, b: str, over: str, seeds: list[Any],
                va: list[float], vb: list[float], resamples: int) -> PairedTest:
    """Paired t and Wilcoxon p-values, the paired t 95% interval of mean(B - A), and a
    bootstrap interval when n allows it."""
    xa, xb = np.asarray(va, float), np.asarray(vb, float)
    d = xb - xa
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant differences: scipy warns and returns nan
        # Identical differences (e.g. one eval interval on every seed) have no variance:
        # t is infinite and scipy's p is 0, a certainty that 2 or 3 seeds do not give.
        p_t = (float("nan") if np.ptp(d) == 0 else
               float(scipy.stats.ttest_rel(xb, xa).pvalue))
        try:
            p_w = float(scipy.stats.wilcoxon(xb, xa).pvalue) if np.any(d != 0) else float("nan")
        except ValueError:
            p_w = float("nan")
    n = len(d)
    half = (float(scipy.stats.t.ppf(0.975, n - 1) * np.std(d, ddof=1) / np.sqrt(n))
            if n > 1 else float("nan"))
    boot = None
    if n >= MIN_BOOTSTRAP_N:
        rng = np.random.default_rng(0)  # fixed: the same table on every call
        means = d[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
        lo, hi = np.percentile(means, [2.5, 97.5])
        boot = (float(lo), float(hi))
    return PairedTest(metric, a, b, over, tuple(seeds), tuple(va), tuple(vb), p_t, p_w,
                      (float(d.mean() - half), float(d.mean() + half)), boot)


def default_pairs(results: list[RowResult], baseline: str | None) -> list[tuple[str, str]]:
    """multi_head vs the other attentions at an otherwise equal model; else all vs a baseline."""
    known = [r for r in results if r.model is not None]
    if baseline is None:
        groups: dict[str, list[RowResult]] = {}
        for r in known:
            shape = {k: v for k, v in r.model.to_dict().items()
                     if k not in ("attention", "size", "vocab_size", *registry.with_settings())}
            groups.setdefault(json.dumps(shape, sort_keys=True), []).append(r)
        pairs = [(mh.row.name, other.row.name) for group in groups.values()
                 for mh in group if mh.model.attention == "multi_head"
                 for other in group if other.model.attention != "multi_head"]
        if pairs:
            return pairs
        standard = [r for r in known if r.model.head_key_size == r.model.head_value_size
                    == r.model.hidden_size // r.model.num_heads]
        baseline = (standard or known or results)[0].row.name
    return [(baseline, r.row.name) for r in results if r.row.name != baseline]


def grid_pairs(grid: str, names: set[str]) -> list[tuple[str, str]]:
    """The pairs a named grid declares (configs/grids.py: PAIRS) among the table's rows."""
    return [(a, b) for a, b in grids.PAIRS.get(grid, []) if a in names and b in names]


def parse_pairs(specs: list[str], names: set[str]) -> list[tuple[str, str]]:
    pairs = []
    for spec in specs:
        a, sep, b = spec.partition(":")
        if not sep or a not in names or b not in names:
            raise ValueError(f"--pairs {spec!r}: use A:B with rows of the table ({sorted(names)})")
        pairs.append((a, b))
    return pairs


def run_tests(table: Table, pairs: list[tuple[str, str]], resamples: int,
              test: str = "t") -> list[PairedTest]:
    """Every metric of every pair with two or more paired seeds, with Holm's correction
    over all of them (one table, one family)."""
    by_name = {r.row.name: r for r in table.results}
    tests = []
    for a, b in pairs:
        # A row that fine-tunes another row's checkpoint has that row's MLM numbers; its
        # source's own pair tests them.
        shared = by_name[a].row.pretrained_by or by_name[b].row.pretrained_by
        for metric in table.metrics:
            if shared and metric.kind in ("mlm", "steps_to"):
                continue
            over, seeds, va, vb = paired_values(by_name[a], by_name[b], metric, table.averaged)
            if len(seeds) >= 2:
                done = paired_test(metric, a, b, over, seeds, va, vb, resamples)
                tests.append(dataclasses.replace(
                    done, cost_a=(by_name[a].params, by_name[a].flops),
                    cost_b=(by_name[b].params, by_name[b].flops)))
    return [dataclasses.replace(t, p_holm=p)
            for t, p in zip(tests, holm([t.p(test) for t in tests]), strict=True)]


# -- tables ------------------------------------------------------------------------------
def cell(stat: Stat, digits: int) -> str:
    if stat.n == 0:
        return "-"
    if stat.n == 1:
        return f"{stat.mean:.{digits}f}"
    return f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f}"


def paper_keys(results: list[RowResult]) -> list[str]:
    keys = dict.fromkeys(k for r in results for k in r.row.reported)
    return list(keys)


def describe(result: RowResult) -> dict[str, str]:
    m = result.model
    if m is None:
        return dict.fromkeys(("attention", "heads", "key", "value", "GFLOPs/token", "params"),
                             "-")
    return {"attention": attention_label(m), "heads": str(m.num_heads),
            "key": str(m.head_key_size),
            "value": str(m.head_value_size), "GFLOPs/token": f"{result.flops / 1e9:.4g}",
            "params": sweep_grids.millions(result.params)}


def finetuning_cell(row: grids.Row) -> str:
    """The row's own fine-tuning args, and whose checkpoint it fine-tunes."""
    args = ", ".join(f"{k}={v}" for k, v in row.glue.items())
    source = f"checkpoint of {row.pretrained_by}" if row.pretrained_by else ""
    return "; ".join(x for x in (args, source) if x) or "-"


def seeds_cell(result: RowResult) -> str:
    pretrain = sum(1 for r in result.runs if r.mlm is not None or r.glue)
    finetune = max((len(s) for r in result.runs for s in r.glue.values()), default=0)
    return f"{pretrain}×{finetune}" if finetune else str(pretrain)


def markdown_table(table: Table) -> str:
    """Our columns, with each paper number beside the column it corresponds to."""
    papers = paper_keys(table.results)
    lines = []
    for r in table.results:
        cells = {"row": r.row.name, **describe(r)}
        if "params_m" in papers:
            cells["params @30522"] = (sweep_grids.millions(r.params_paper_vocab)
                                      if r.params_paper_vocab else "-")
        if any(x.row.glue or x.row.pretrained_by for x in table.results):
            cells["fine-tuning"] = finetuning_cell(r.row)
        cells["seeds (pt×ft)"] = seeds_cell(r)
        cells |= {m.name: cell(table.stat(r, m), m.digits) for m in table.metrics}
        columns = list(cells)
        for key in papers:
            name, anchor = PAPER_COLUMNS.get(key, (f"{key} (paper)", None))
            columns.insert(columns.index(anchor) + 1 if anchor in columns else len(columns), name)
            cells[name] = paper_value(r.row.reported.get(key), key)
        if not lines:
            lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines.append("| " + " | ".join(cells[c] for c in columns) + " |")
    return "\n".join(lines)


def paper_value(value: float | None, key: str) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}M" if key == "params_m" else f"{value:g}"


def csv_table(table: Table) -> str:
    results, metrics = table.results, table.metrics
    papers = paper_keys(results)
    header = ["row", "attention", "num_heads", "key_size", "value_size", "params",
              "params_vocab30522", "gflops_per_token", "seq_len", "pretrain_seeds"]
    for m in metrics:
        header += [f"{m.name} mean", f"{m.name} std", f"{m.name} n", f"{m.name} over"]
    header += [f"paper {k}" for k in papers]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for r in results:
        m = r.model
        row = [r.row.name, m.attention if m else "", m.num_heads if m else "",
               m.head_key_size if m else "", m.head_value_size if m else "",
               r.params or "", r.params_paper_vocab or "",
               "" if r.flops is None else r.flops / 1e9, r.seq_len or "",
               " ".join(str(s) for s in r.seeds())]
        for metric in metrics:
            stat = table.stat(r, metric)
            row += ["" if stat.n == 0 else stat.mean, "" if stat.n < 2 else stat.std, stat.n,
                    stat.over if stat.n else ""]
        row += [r.row.reported.get(k, "") for k in papers]
        writer.writerow(row)
    return buffer.getvalue()


def fmt_p(p: float) -> str:
    if np.isnan(p):
        return "-"  # no variation in the differences: nothing to test
    return "<1e-4" if p < 1e-4 else f"{p:.3g}"


def cost_cell(a: tuple[int | None, float | None], b: tuple[int | None, float | None]) -> str:
    """Parameters (M) and forward GFLOPs/token of A -> B: equal cost is then visible."""
    if None in (*a, *b):
        return "-"
    return (f"{a[0] / 1e6:.1f}M → {b[0] / 1e6:.1f}M, {a[1] / 1e9:.3g} → {b[1] / 1e9:.3g} "
            f"({b[1] / a[1]:.2f}x)")


def significance_markdown(tests: list[PairedTest], test: str, alpha: float) -> str:
    header = ["metric", "A", "B", "paired over", "n", "mean A", "mean B", "B − A",
              "95% CI (paired t)", "95% CI (bootstrap)", "p (paired t)", "p (Wilcoxon)",
              f"p ({'t' if test == 't' else 'Wilcoxon'}, Holm over {len(tests)})",
              "params, GFLOPs/token A → B", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for t in tests:
        d = t.metric.digits + 1
        boot = ("-" if t.ci_bootstrap is None else
                f"[{t.ci_bootstrap[0]:+.{d}f}, {t.ci_bootstrap[1]:+.{d}f}]")
        lines.append("| " + " | ".join([
            t.metric.name, t.a, t.b, t.over, str(len(t.seeds)),
            f"{np.mean(t.values_a):.{d}f}", f"{np.mean(t.values_b):.{d}f}",
            f"{t.diff:+.{d}f}", f"[{t.ci[0]:+.{d}f}, {t.ci[1]:+.{d}f}]", boot,
            fmt_p(t.p_t), fmt_p(t.p_wilcoxon), fmt_p(t.p_holm), cost_cell(t.cost_a, t.cost_b),
            t.verdict(test, alpha)]) + " |")
    return "\n".join(lines)


def significance_csv(tests: list[PairedTest], test: str, alpha: float) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["metric", "a", "b", "paired_over", "seeds", "values_a", "values_b",
                     "mean_diff_b_minus_a", "ci_low", "ci_high", "bootstrap_low",
                     "bootstrap_high", "p_ttest_rel", "p_wilcoxon", "p_holm", "params_a",
                     "params_b", "flops_per_token_a", "flops_per_token_b", "verdict"])
    for t in tests:
        boot = t.ci_bootstrap or ("", "")
        writer.writerow([t.metric.name, t.a, t.b, t.over, " ".join(map(str, t.seeds)),
                         " ".join(map(repr, t.values_a)), " ".join(map(repr, t.values_b)),
                         t.diff, t.ci[0], t.ci[1], *boot, t.p_t, t.p_wilcoxon, t.p_holm,
                         *(("" if v is None else v) for v in (*t.cost_a[:1], *t.cost_b[:1],
                                                              t.cost_a[1], t.cost_b[1])),
                         t.verdict(test, alpha)])
    return buffer.getvalue()


def notes(results: list[RowResult], averaged: list[str], test: str, alpha: float,
          metrics: tuple[Metric, ...] = ()) -> str:
    lines = [
        "Parameters without the MLM head at the run's vocabulary; GFLOPs: forward encoder "
        "per token at the run's sequence length. GLUE: main dev score at the best learning "
        "rate. ± is the std over pretraining seeds (a seed's GLUE score is its mean over "
        "fine-tuning seeds), or over fine-tuning seeds for rows with one pretraining seed; "
        "seeds (pt×ft) counts both.",
    ]
    if any(m.kind == "steps_to" for m in metrics):
        lines.append("steps to: the first evaluated pretraining step at which the scalar "
                     "reached the level (resolution: the eval interval); a seed that never "
                     "reached it is left out of that cell and its pairs, so compare n.")
    if len(averaged) > 1:
        lines.append(f"Average over {', '.join(averaged)} (the tasks every row has; no WNLI).")
    if any(r.row.reported for r in results):
        ran_squad = any(m.key == SQUAD_F1 for m in metrics)
        lines.append("(paper): the numbers the paper reports for the row"
                     + ("" if ran_squad else " (its SQuAD F1 is not run here: sweep.py "
                        "--glue_tasks ...,squad)") + "; its parameter counts use vocabulary "
                     "30522.")
    lines.append(
        f"Significance: paired by seed id. Verdict (one rule): \"B better\" / \"A better\" "
        f"when the {'paired t-test' if test == 't' else 'Wilcoxon test'}'s p after Holm's "
        f"correction over every test of this table is below alpha={alpha}; \"equivalent "
        f"(±m)\" when the whole 95% paired t interval lies inside ±m (m: 1 point for scores "
        f"and MLM accuracy, 0.02 nats for MLM loss); else \"not settled\". A pair with fewer "
        f"than two paired seeds is not tested. The bootstrap interval is shown from "
        f"n = {MIN_BOOTSTRAP_N} pairs on (below it undercovers: at n = 3 it is [min, max], "
        f"about 75%). Cost: parameters without the MLM head and forward GFLOPs per token, "
        f"A → B, so \"at equal parameters\" is not read as \"at equal cost\".")
    return "\n\n".join(lines)


# -- plots -------------------------------------------------------------------------------
def finetuning_start(row: grids.Row) -> str:
    if from_scratch(row):
        return "from scratch"
    return "talking heads inserted" if row.glue.get("insert_th") else "pretrained"


def attention_label(model: Any) -> str:
    """The attention as a plot names it (the variant's label): talking heads with
    identity-initialised mixing, groups or dynamic projections is its own line (it sits
    beside the plain rows at the same heads and lr)."""
    return registry.get(model.attention).label(model)


def plot_lines(results: list[RowResult], x_name: str
               ) -> dict[str, list[tuple[float, RowResult]]]:
    """{line label: [(x, row)]}: rows that differ only in x share a line. A row whose x
    its line already has (a setting the label does not name) gets a point of its own,
    labelled with its name, rather than a vertical jump inside someone else's line."""
    lines: dict[str, list[tuple[float, RowResult]]] = {}
    for r in results:
        m = r.model
        if m is None:
            continue
        attention = attention_label(m)
        if x_name == "heads":
            default = m.head_key_size == m.hidden_size // m.num_heads
            x, label = m.num_heads, f"{attention}, key {'d/h' if default else m.head_key_size}"
        elif x_name == "lr":
            rates = {run.glue_lr for run in r.runs} - {None}
            x = rates.pop() if len(rates) == 1 else None
            label = f"{attention}, {finetuning_start(r.row)}"
        else:
            x = m.head_key_size
            label = f"{attention}, {m.num_heads} heads, value {m.head_value_size}"
        if x is None:
            continue
        if any(x == taken for taken, _ in lines.get(label, [])):
            label = f"{label} ({r.row.name})"
        lines.setdefault(label, []).append((x, r))
    return lines


def axis_label(metric: Metric) -> tuple[str, bool]:
    """(the y axis's label with its unit, whether the value is a percentage-like score
    whose axis ends at 100)."""
    if metric.kind == "mlm":
        return (("MLM eval loss (nats per masked token)", False) if metric.key == "eval_loss"
                else ("MLM eval accuracy (%)", True))
    if metric.kind == "steps_to":
        return "pretraining steps", False
    if metric.kind == "average":
        return "average dev score (x100)", True
    task = glue.get_task(metric.key.split("-m")[0])
    unit = "%" if task.main_metric in ("accuracy", "f1") else "x100"
    return f"dev {task.main_metric} ({unit})", True


def score_figure(table: Table, x_name: str):
    """Score vs x (heads, key size, or lr: the fine-tuning learning rate), one line per
    group of otherwise equal rows (plot_lines); None when nothing has two points. One
    legend for all panels, below them, so that it covers no data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in table.metrics if any(table.stat(r, m).n for r in table.results)
             and (x_name != "lr" or m.kind in ("task", "average"))]
    lines = plot_lines(table.results, x_name)
    # A group with one x (e.g. the fixed head size row among key sizes) shows as a point.
    if not shown or all(len({x for x, _ in pts}) < 2 for pts in lines.values()):
        return None
    columns = min(4, len(shown))
    rows = -(-len(shown) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.4 * rows + 0.3 * len(lines)),
                             squeeze=False)
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    xs = sorted({x for points in lines.values() for x, _ in points})
    for ax, metric in zip(axes.flat, shown, strict=False):
        for group, points in lines.items():
            stats = sorted(((x, table.stat(r, metric)) for x, r in points),
                           key=lambda item: item[0])
            stats = [(x, s) for x, s in stats if s.n]
            if stats:
                ax.errorbar([x for x, _ in stats], [s.mean for _, s in stats],
                            yerr=[0.0 if s.n < 2 else s.std for _, s in stats],
                            marker="o", capsize=3, label=group)
        # heads and key sizes double from row to row; learning rates go in decades
        ax.set_xscale("log", base=10 if x_name == "lr" else 2)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
        ax.set_xlabel({"heads": "heads", "lr": "fine-tuning learning rate"}.get(
            x_name, "key size per head"))
        label, percent = axis_label(metric)
        ax.set_ylabel(label)
        if percent and ax.get_ylim()[1] > 100:
            ax.set_ylim(top=100)  # no score lies above it
        ax.set_title(metric.name)
    handles, labels = axes[0][0].get_legend_handles_labels()
    legend_rows = -(-len(labels) // 3)
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.3 * legend_rows / fig.get_figheight(), 1, 1))
    return fig


def plot_scores(table: Table, x_name: str, path: str) -> bool:
    import matplotlib.pyplot as plt

    fig = score_figure(table, x_name)
    if fig is None:
        return False
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def scalar_curve(logdir: str, tag: str) -> dict[int, float]:
    """{step: value} of a TensorBoard scalar; a resumed run's later value wins."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(logdir, size_guidance={"scalars": 0})
    events.Reload()
    if tag not in events.Tags().get("scalars", []):
        return {}
    return {e.step: e.value for e in events.Scalars(tag)}


def plot_loss_curves(results: list[RowResult], path: str) -> bool:
    """MLM train and eval loss vs step per row, the mean over its pretraining seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    drawn = False
    for r in results:
        for ax, tag in zip(axes, ("loss", "eval_loss"), strict=True):
            if r.row.pretrained_by:
                continue  # its source row draws these curves
            curves = [scalar_curve(run.pretrain, tag) for run in r.runs]
            curves = [c for c in curves if c]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(c) for c in curves)))
            ax.plot(steps, [np.mean([c[s] for c in curves]) for s in steps],
                    marker="." if len(steps) < 30 else None, label=r.row.name)
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    for ax, title in zip(axes, ("MLM train loss", "MLM eval loss"), strict=True):
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats per masked token)")
        ax.set_title(title)
    # One legend beside the panels: inside them it covered the curves' early steps.
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7,
               frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # the legend outside included
    plt.close(fig)
    return True


def write_plots(table: Table, directory: str) -> list[str]:
    os.makedirs(directory, exist_ok=True)
    written = []
    for name, draw in (
        ("score_vs_heads.png", lambda p: plot_scores(table, "heads", p)),
        ("score_vs_key_size.png", lambda p: plot_scores(table, "key", p)),
        ("score_vs_finetuning_lr.png", lambda p: plot_scores(table, "lr", p)),
        ("mlm_loss_curves.png", lambda p: plot_loss_curves(table.results, p)),
    ):
        path = os.path.join(directory, name)
        if draw(path):
            written.append(path)
    return written


# -- main --------------------------------------------------------------------------------
def collect(out: str, grid: str | None = None, grid_file: str | None = None,
            steps_to: tuple[Metric, ...] = ()) -> Table:
    """Reads every row's runs and builds its model statistics; `steps_to` columns follow
    the MLM ones."""
    out, only = rows_location(out, grid, grid_file)
    label, rows, manifest = load_rows(out, grid, grid_file, only)
    results = [read_row(out, row) for row in rows]
    paper_vocab = any("params_m" in row.reported for row in rows)
    for result in results:
        add_model_stats(result, manifest, paper_vocab)
    metrics, averaged = build_metrics(results)
    metrics[len(MLM_METRICS):len(MLM_METRICS)] = list(steps_to)
    for run in (run for result in results for run in result.runs
                if not from_scratch(result.row)):
        curves: dict[str, dict[int, float]] = {}  # one events read per run and scalar
        for metric in steps_to:
            if metric.key not in curves:
                curves[metric.key] = scalar_curve(run.pretrain, metric.key)
            run.reached[metric.name] = first_step_reaching(curves[metric.key], metric)
    return Table(label, results, metrics, averaged)


def render(table: Table, pairs: list[tuple[str, str]], test: str, alpha: float,
           resamples: int) -> tuple[str, str, str]:
    """(markdown with both tables and the notes, results CSV, significance CSV)."""
    tests = run_tests(table, pairs, resamples, test)
    significance = (significance_markdown(tests, test, alpha) if tests else
                    "No pair of rows shares two or more seeds yet; run more seeds "
                    "(scripts/sweep.py --seeds, or configs/glue.py seeds=) to test differences.")
    markdown = (f"# {table.label}\n\n{markdown_table(table)}\n\n"
                f"## Paired differences (B − A)\n\n{significance}\n\n"
                f"{notes(table.results, table.averaged, test, alpha, tuple(table.metrics))}\n")
    return markdown, csv_table(table), significance_csv(tests, test, alpha)


def main(argv: list[str]) -> None:
    del argv
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)  # JAX's backend notes are not results
    out = FLAGS.out
    formats = set(FLAGS.format)
    try:
        if not os.path.isdir(out):
            raise ValueError(f"--out={out}: no such directory")
        if formats - {"md", "csv"}:
            raise ValueError(f"--format={','.join(FLAGS.format)}: use md and/or csv")
        steps_to = tuple(parse_steps_to(spec) for spec in FLAGS.steps_to)
        table = collect(out, FLAGS.grid, FLAGS.grid_file, steps_to)
        names = {r.row.name for r in table.results}
        if FLAGS.baseline and FLAGS.baseline not in names:
            raise ValueError(f"--baseline={FLAGS.baseline} is not a row ({sorted(names)})")
        pairs = parse_pairs(FLAGS.pairs, names)
        if not pairs and not FLAGS.baseline:
            pairs = grid_pairs(table.label, names)
        pairs = pairs or default_pairs(table.results, FLAGS.baseline)
    except ValueError as e:
        sys.exit(f"error: {e}")
    markdown, results_csv, significance_csv_text = render(
        table, pairs, FLAGS.test, FLAGS.alpha, FLAGS.bootstrap)
    print(markdown)
    directory = FLAGS.tables_dir or out
    written = {"table.md": markdown} if "md" in formats else {}
    if "csv" in formats:
        written |= {"table.csv": results_csv, "significance.csv": significance_csv_text}
    for name, text in written.items():
        write_text_atomic(os.path.join(directory, name), text)
        print(f"wrote {os.path.join(directory, name)}")
    if FLAGS.plots:
        for path in write_plots(table, FLAGS.plots):
            print(f"wrote {path}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
