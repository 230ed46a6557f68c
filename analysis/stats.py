"""Paired significance tests between rows of a table, with one verdict rule.

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
"equivalent (±m)" when the whole t interval lies inside the metric's margin m (0.5
points for GLUE scores and MLM accuracy, the papers' effect sizes: the low-rank paper's
Table 1 differences are about 0.5 points; 0.02 nats for MLM loss); else "not settled".
Beside each pair: parameters and forward GFLOPs per token of A and B, so equal
parameters are not read as equal cost.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import warnings
from typing import Any

import numpy as np
import scipy.stats

from analysis.runs import (
    MLM_METRICS,
    Metric,
    RowResult,
    Table,
    finetune_values,
    parse_steps_to,
    pretrain_value,
)
from attention import registry
from configs import grids


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


def welch(va: list[float], vb: list[float]) -> tuple[float, tuple[float, float], float, float]:
    """Welch's t of B against A, for two samples that share no draw (e.g. two rows whose
    encoders were drawn apart): (mean B - mean A, its 95% Welch interval, p,
    Welch-Satterthwaite df), as scipy.stats.ttest_ind(equal_var=False) gives them."""
    b, a = np.asarray(vb, float), np.asarray(va, float)
    result = scipy.stats.ttest_ind(b, a, equal_var=False)
    low, high = result.confidence_interval(0.95)
    return (float(b.mean() - a.mean()), (float(low), float(high)), float(result.pvalue),
            float(result.df))


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


def with_holm(tests: list[PairedTest], test: str = "t") -> list[PairedTest]:
    """The tests with p_holm set: Holm over all of them (one table, one family)."""
    return [dataclasses.replace(t, p_holm=p)
            for t, p in zip(tests, holm([t.p(test) for t in tests]), strict=True)]


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


# TrendTest.unit: what one regressed difference is.
PER_SEED = "per-seed differences"  # every seed draws its own start
MEANS_PER_X = "means per x"  # the seeds at one x share a start


@dataclasses.dataclass(frozen=True)
class TrendTest:
    """Does a paired difference B - A change with a setting x (e.g. the head count)?
    Ordinary least squares of every per-seed difference on log2(x): the slope is the
    change of B - A per doubling of x. The differences must be independent samples:
    per seed where every seed draws its own start, the mean per x where the seeds at
    one x share a start (`unit` says which). One test, reported outside the table's
    Holm family (it asks another question than any pair)."""
    label: str  # "B - A" in words
    xs: tuple[float, ...]  # x of each difference
    diffs: tuple[float, ...]
    slope: float  # per doubling of x
    ci: tuple[float, float]  # 95% t interval of the slope (n - 2 degrees of freedom)
    p: float  # two-sided, slope = 0
    unit: str = PER_SEED

    def verdict(self, alpha: float) -> str:
        if self.p < alpha:
            return "grows with x" if self.slope > 0 else "falls with x"
        return "not settled"


def difference_trend(label: str, points: list[tuple[float, list[float]]],
                     unit: str = PER_SEED) -> TrendTest:
    """points: (x, the differences B - A at x, independent samples); at least two x and
    three differences."""
    xs = [float(x) for x, diffs in points for _ in diffs]
    ds = [float(d) for _, diffs in points for d in diffs]
    if len(set(xs)) < 2 or len(ds) < 3:
        raise ValueError(f"trend {label}: needs differences at two or more settings and "
                         f"three or more in all (has {len(ds)} at {len(set(xs))})")
    if np.ptp(ds) == 0:
        raise ValueError(f"trend {label}: every difference is {ds[0]:g}; no spread to test")
    fit = scipy.stats.linregress(np.log2(xs), ds)
    half = float(scipy.stats.t.ppf(0.975, len(ds) - 2) * fit.stderr)
    return TrendTest(label, tuple(xs), tuple(ds), float(fit.slope),
                     (float(fit.slope - half), float(fit.slope + half)), float(fit.pvalue),
                     unit)


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
        if not sep or a not in names or b not in names or a == b:
            raise ValueError(f"--pairs {spec!r}: use A:B with two rows of the table "
                             f"({sorted(names)})")
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
    return with_holm(tests, test)


# -- re-judging a written table ----------------------------------------------------------
def metric_named(name: str) -> Metric:
    """The Metric behind a significance.csv column name (MLM loss / MLM acc, steps to
    TAG>=V, a GLUE average, else a task's score)."""
    for metric in MLM_METRICS:
        if metric.name == name:
            return metric
    if name.startswith("steps to "):
        return parse_steps_to(name[len("steps to "):])
    if name.startswith(("Avg (", "GLUE avg")):
        return Metric(name, "average")
    return Metric(name, "task", name)


def costs_from_table_csv(path: str) -> dict[str, tuple[int | None, float | None]]:
    """{row: (parameters, forward FLOPs/token)} from a tables.py table.csv; {} without one."""
    if not os.path.isfile(path):
        return {}
    with open(path, newline="") as f:
        return {r["row"]: (int(r["params"]) if r.get("params") else None,
                           float(r["gflops_per_token"]) * 1e9 if r.get("gflops_per_token")
                           else None) for r in csv.DictReader(f)}


def tests_from_csv(path: str, resamples: int = 10_000, test: str = "t") -> list[PairedTest]:
    """A significance.csv's pairs (this or an earlier tables.py's: each row keeps its
    seeds and both sides' values) tested again under today's rule, Holm over the file;
    the parameters and FLOPs of each side from the table.csv beside it."""
    costs = costs_from_table_csv(os.path.join(os.path.dirname(path), "table.csv"))
    tests = []
    with open(path, newline="") as f:
        for line, record in enumerate(csv.DictReader(f), start=2):
            try:
                seeds = record["seeds"].split()
                va = [float(v) for v in record["values_a"].split()]
                vb = [float(v) for v in record["values_b"].split()]
                metric = metric_named(record["metric"])
                a, b, over = record["a"], record["b"], record["paired_over"]
            except (KeyError, ValueError, AttributeError) as error:
                raise ValueError(f"{path}:{line}: not a significance.csv row ({error})") from None
            if not (len(seeds) == len(va) == len(vb)) or len(seeds) < 2:
                raise ValueError(f"{path}:{line}: seeds, values_a and values_b need the same "
                                 f"length, two or more")
            tests.append(dataclasses.replace(
                paired_test(metric, a, b, over, seeds, va, vb, resamples),
                cost_a=costs.get(a, (None, None)), cost_b=costs.get(b, (None, None))))
    return with_holm(tests, test)
