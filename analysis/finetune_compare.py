"""Paired comparison of fine-tuning workdirs (eval_glue.py / eval_squad.py) that share
one protocol: the same tasks, learning-rate grid, fine-tuning seeds, examples and
epochs, each row from its own start (a Hugging Face checkpoint, a pretraining run, a
talking-heads insertion, init=scratch).

Each row is scored, per task, on the task's main dev metric (or one named metric for
every task, e.g. accuracy beside MRPC's F1, whose always-"paraphrase" floor is 81) at
its own best learning rate (the best mean dev score over seeds, as eval_glue.py's
results.md does); the dev scores that choose it also report it, for every row alike. Two
rows' scores are paired by fine-tuning seed: the same seed gives both the same
classifier init draw, example order and dropout stream, so their difference is the
start's, not the data order's. One pretrained start per row: the spread is fine-tuning
noise only, and a verdict speaks for these starts, not for the architecture over
pretraining seeds (init=scratch rows draw every weight per seed instead: their spread
holds the init's noise too).

A row is read from its workdir, or from a table.json this module wrote (its rows carry
every score, the protocol and the model): a row fine-tuned on a machine whose workdirs are
gone pairs with one fine-tuned here.

Tests and verdicts are analysis/stats.py's: paired t interval and p, Wilcoxon p,
Holm's correction over every test of the table (one table, one family), "B better" /
"A better" when the corrected p < alpha, "equivalent (±0.5)" when the whole t interval
lies inside 0.5 points (the papers' effect sizes), else "not settled". Parameters and
forward GFLOPs per token (at the protocol's max_seq_length) of both rows sit beside each
pair.

A change (--change A:B@TABLE) asks whether B - A here differs from the same rows' B - A
in another study's landed table: Welch's t on the two sides' per-seed differences (the
studies share no checkpoint), Holm over the table's change tests, a family apart from
its pairs.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import re
from typing import Any

import numpy as np

from analysis import stats, tables
from analysis.runs import Metric
from analysis.sweep_grids import flops_per_token, millions, parameter_counts
from attention import registry
from models import ModelConfig
from training import results

# glue_identity.json fields that make two rows' fine-tuning seeds comparable.
PROTOCOL = ("max_seq_length", "batch_size", "num_epochs", "max_train_examples",
            "group_by_length", "doc_stride", "max_query_length")
IDENTITY = "glue_identity.json"


# task -> learning rate -> fine-tuning seed -> dev score
ScoresByTask = dict[str, dict[float, dict[int, float]]]


def best_rate(by_lr: dict[float, dict[int, float]]) -> float:
    """The learning rate of the best mean dev score over fine-tuning seeds."""
    return max(sorted(by_lr), key=lambda lr: np.mean(list(by_lr[lr].values())))


@dataclasses.dataclass(frozen=True)
class FineTuneRow:
    name: str
    workdir: str
    source: str  # the start, as eval_glue.py named it
    model: ModelConfig
    protocol: dict[str, Any]
    # task -> learning rate -> fine-tuning seed -> dev score (the metric's)
    scores: ScoresByTask
    metric: str = ""  # a dev metric's name; "": each task's main one
    landed_in: str | None = None  # the table.json it was read from, if not its workdir

    @property
    def from_scratch(self) -> bool:
        return self.source.startswith(results.SCRATCH_START)

    def best_lr(self, task: str) -> float:
        return best_rate(self.scores[task])

    def at_best(self, task: str) -> dict[int, float]:
        return self.scores[task][self.best_lr(task)]

    # Cached: each count traces the model (jax.eval_shape), and every pair, task and
    # table cell asks for them.
    @functools.cached_property
    def params(self) -> int:
        return parameter_counts(self.model)[0]

    @functools.cached_property
    def flops(self) -> float:
        return flops_per_token(self.model, int(self.protocol["max_seq_length"]))


def run_score(run: results.RunResult, run_dir: str, metric: str) -> float:
    """The run's main dev score, or the named metric's mean over its dev splits (MNLI has
    two, as main is)."""
    if not metric:
        return run.main
    if not run.dev or any(metric not in values for values in run.dev.values()):
        have = sorted({m for values in run.dev.values() for m in values})
        raise ValueError(f"--metric {metric}: {results.RunResult.path(run_dir)} has no dev "
                         f"{metric} (it has {', '.join(have) or 'none'})")
    return float(np.mean([values[metric] for values in run.dev.values()]))


def landed_table(table: str, metric: str, where: str) -> dict[str, dict[str, Any]]:
    """The rows of a table.json written by to_json, by name, as landed, when the table is
    scored by the same metric; ValueError starting with `where` otherwise."""
    try:
        with open(table) as f:
            landed = json.load(f)
        by_name = {row["name"]: row for row in landed["rows"]}
    except (OSError, ValueError, KeyError, TypeError) as e:  # JSONDecodeError: ValueError
        raise ValueError(f"{where}: not a table.json of scripts/compare_finetuning.py "
                         f"({type(e).__name__}: {e})") from None
    scored_by = landed.get("metric", "main")
    if scored_by != (metric or "main"):
        raise ValueError(f"{where}: scored by {scored_by}, not {metric or 'main'}")
    return by_name


def row_named(by_name: dict[str, dict[str, Any]], name: str, where: str) -> dict[str, Any]:
    if name not in by_name:
        raise ValueError(f"{where}: no row {name} there (it has "
                         f"{', '.join(sorted(by_name))})")
    return by_name[name]


def landed_scores(row: dict[str, Any], where: str) -> ScoresByTask:
    """A landed row's scores (tables of any age carry them; not all carry the model)."""
    try:
        scores = {task: {float(lr): {int(seed): float(v) for seed, v in by_seed.items()}
                         for lr, by_seed in by_lr.items()}
                  for task, by_lr in row["scores"].items()}
        if not scores or not all(by_lr and all(by_lr.values()) for by_lr in scores.values()):
            raise ValueError("a task or learning rate without scores")
        return scores
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{where}: row {row.get('name')} is damaged "
                         f"({type(e).__name__}: {e})") from None


def read_landed_row(name: str, table: str, metric: str = "") -> FineTuneRow:
    """Row NAME of a table.json written by to_json, scored by the same metric; ValueError
    naming the file when it has no such row, another metric, or rows without their model
    (a table written before rows carried it)."""
    where = f"--row {name}={table}"
    row = row_named(landed_table(table, metric, where), name, where)
    if "model" not in row:
        raise ValueError(f"{where}: its rows have no model (a table written "
                         f"before they carried it): give the workdir")
    scores = landed_scores(row, where)
    try:
        return FineTuneRow(name, row["workdir"], row["source"],
                           ModelConfig.from_config(row["model"]),
                           {k: row["protocol"].get(k) for k in PROTOCOL}, scores, metric,
                           landed_in=row.get("landed_in") or table)
    except (ValueError, KeyError, TypeError, AttributeError) as e:  # ConfigError: a ValueError
        raise ValueError(f"{where}: row {name} is damaged "
                         f"({type(e).__name__}: {e})") from None


def read_row(name: str, workdir: str, metric: str = "") -> FineTuneRow:
    """A fine-tuning workdir's start, protocol and every finished run's dev score (each
    task's main metric, or the named one); a path ending in .json is a landed table's row
    (read_landed_row)."""
    if workdir.endswith(".json"):
        return read_landed_row(name, workdir, metric)
    path = os.path.join(workdir, IDENTITY)
    if not os.path.isfile(path):
        raise ValueError(f"--row {name}={workdir}: no {IDENTITY} (not an eval_glue.py or "
                         f"eval_squad.py workdir, or nothing has run there yet)")
    identity = results.read_json(path)
    scores: ScoresByTask = {}
    for run_dir in sorted(glob.glob(os.path.join(workdir, "*", "lr*_seed*"))):
        run = results.RunResult.read(run_dir)
        if run is not None:  # unfinished runs have no result.json yet
            scores.setdefault(run.task, {}).setdefault(run.learning_rate, {})[run.seed] = run_score(
                run, run_dir, metric)
    if not scores:
        raise ValueError(f"--row {name}={workdir}: no finished fine-tuning run "
                         f"(TASK/lr*_seed*/result.json)")
    # Paths under the current directory as relative ones, and an installed package's
    # from its site-packages/: tables go into docs/.
    source = re.sub(r"/[^\s:]*/site-packages/", "site-packages/",
                    str(identity["init"]).replace(os.getcwd() + os.sep, ""))
    return FineTuneRow(name, workdir, source,
                       ModelConfig.from_config(identity["model"]),
                       {k: identity.get(k) for k in PROTOCOL}, scores, metric)


def check_same_protocol(rows: list[FineTuneRow]) -> None:
    first = rows[0]
    for row in rows[1:]:
        changed = [k for k in PROTOCOL if row.protocol[k] != first.protocol[k]]
        if changed:
            raise ValueError(f"--row {row.name}: its protocol differs from {first.name}'s in "
                             f"{', '.join(changed)}; fine-tuning seeds pair only within one")


def parse_rows(specs: list[str], metric: str = "") -> list[FineTuneRow]:
    rows = []
    for spec in specs:
        name, sep, workdir = spec.partition("=")
        if not sep or not name or not workdir:
            raise ValueError(f"--row {spec!r}: use NAME=WORKDIR")
        if name in [r.name for r in rows]:
            raise ValueError(f"--row {name}: the name is used twice")
        rows.append(read_row(name, workdir, metric))
    check_same_protocol(rows)
    return rows


def task_metric(task: str, metric: str = "") -> Metric:
    return Metric(score_label(task, metric), "task", task)


def score_label(task: str, metric: str = "") -> str:
    return f"{task} dev {metric}" if metric else f"{task} dev"


def run_tests(rows: list[FineTuneRow], pairs: list[tuple[str, str]], resamples: int = 10_000,
              test: str = "t") -> list[stats.PairedTest]:
    """Every task both rows ran with two or more common fine-tuning seeds at their best
    learning rates; Holm over all of them."""
    by_name = {r.name: r for r in rows}
    tests = []
    for a_name, b_name in pairs:
        a, b = by_name[a_name], by_name[b_name]
        for task in sorted(set(a.scores) & set(b.scores)):
            va, vb = a.at_best(task), b.at_best(task)
            seeds = sorted(set(va) & set(vb))
            if len(seeds) < 2:
                continue
            over = (f"fine-tuning seeds (lr {a.best_lr(task):g} vs {b.best_lr(task):g})")
            done = stats.paired_test(task_metric(task, a.metric), a_name, b_name, over, seeds,
                                     [va[s] for s in seeds], [vb[s] for s in seeds], resamples)
            tests.append(dataclasses.replace(done, cost_a=(a.params, a.flops),
                                             cost_b=(b.params, b.flops)))
    return stats.with_holm(tests, test)


def parse_trend(specs: list[str], names: set[str]) -> list[tuple[str, str, float]]:
    """--trend A:B@X,...: the pairs whose differences are regressed on log2(X)."""
    points = []
    for spec in specs:
        pair, sep, x = spec.rpartition("@")
        try:
            value = float(x)
        except ValueError:
            value = float("nan")
        if not sep or not value > 0:
            raise ValueError(f"--trend {spec!r}: use A:B@X with X > 0 (e.g. mh_h8:th_h8@8)")
        try:
            (a, b), = stats.parse_pairs([pair], names)
        except ValueError:
            raise ValueError(f"--trend {spec!r}: A and B must be two rows of the table "
                             f"({sorted(names)})") from None
        if (a, b) in [(pa, pb) for pa, pb, _ in points]:
            raise ValueError(f"--trend {spec!r}: the pair is given twice (its differences "
                             f"would count twice)")
        points.append((a, b, value))
    return points


def trend_tests(rows: list[FineTuneRow], points: list[tuple[str, str, float]], label: str
                ) -> list[tuple[str, stats.TrendTest | str]]:
    """Per task: B - A of every point at the rows' best learning rates, paired by
    fine-tuning seed, regressed on log2(X) (stats.difference_trend); a task it cannot be
    fitted for gets the reason instead (the pairs' table is written either way).

    Rows from scratch draw their start per seed, so each seed's difference is an
    independent sample. A row fine-tuned from a checkpoint shares that one draw across
    its seeds: the differences at one x then carry a common offset, and the sample is
    their mean per x (n = the number of x)."""
    by_name = {r.name: r for r in rows}
    names = [n for a, b, _ in points for n in (a, b)]
    shared_start = any(not by_name[n].from_scratch for n in names)
    found: list[tuple[str, stats.TrendTest | str]] = []
    for task in sorted({t for n in names for t in by_name[n].scores}):
        missing = [n for n in dict.fromkeys(names) if task not in by_name[n].scores]
        if missing:
            found.append((task, f"{', '.join(missing)} did not run {task}"))
            continue
        diffs = []
        for a, b, x in points:
            va, vb = by_name[a].at_best(task), by_name[b].at_best(task)
            diffs.append((x, [vb[s] - va[s] for s in sorted(set(va) & set(vb))]))
        unit = stats.PER_SEED
        if shared_start:
            diffs = [(x, [float(np.mean(d))] if d else []) for x, d in diffs]
            unit = stats.MEANS_PER_X
        try:
            found.append((task, stats.difference_trend(label, diffs, unit)))
        except ValueError as error:
            found.append((task, str(error)))
    return found


@dataclasses.dataclass(frozen=True)
class Change:
    """--change A:B@TABLE[=A0:B0]: rows A and B here, rows A0 and B0 (default: A and B)
    of a landed table.json."""
    a: str
    b: str
    table: str
    there_a: str
    there_b: str

    @property
    def spec(self) -> str:
        renamed = ((self.there_a, self.there_b) != (self.a, self.b))
        return (f"{self.a}:{self.b}@{self.table}" +
                (f"={self.there_a}:{self.there_b}" if renamed else ""))


@dataclasses.dataclass(frozen=True)
class ChangeTest:
    """Has B - A moved between another study (a landed table) and this one? Welch's t of
    this table's per-seed differences against that table's: the two studies share no
    checkpoint and no fine-tuning run, so their differences pair with nothing."""
    task: str
    change: Change
    here: tuple[float, ...]  # B - A per fine-tuning seed, each row at its best rate here
    there: tuple[float, ...]  # B0 - A0 the same way in the landed table
    diff: float  # mean here - mean there
    ci: tuple[float, float]  # 95% Welch interval
    p: float
    df: float
    # what else differs between the studies' fine-tuning: PROTOCOL fields, rate grids
    protocol_changes: tuple[str, ...]
    p_holm: float = float("nan")  # over the table's change tests

    def verdict(self, alpha: float) -> str:
        if self.p_holm < alpha:
            return "changed (" + ("+" if self.diff > 0 else "−") + ")"
        return "not settled"


def parse_change(specs: list[str], names: set[str]) -> list[Change]:
    """--change A:B@TABLE[=A0:B0],...: the pairs whose differences are compared with the
    differences of rows A0 and B0 (default: the same names) in a landed table.json."""
    changes: list[Change] = []
    for spec in specs:
        pair, sep, rest = spec.partition("@")
        table, renamed, there_pair = rest.partition("=")
        there = there_pair.split(":") if renamed else pair.split(":")
        if not sep or not table or len(there) != 2 or not all(there):
            raise ValueError(f"--change {spec!r}: use A:B@TABLE.json, or A:B@TABLE.json=A0:B0 "
                             f"where the landed rows are named otherwise (e.g. "
                             f"mh_h8:mh_h96@docs/results/head_counts_pretrained/table.json)")
        try:
            (a, b), = stats.parse_pairs([pair], names)
        except ValueError:
            raise ValueError(f"--change {spec!r}: A and B must be two rows of the table "
                             f"({sorted(names)})") from None
        change = Change(a, b, table, there[0], there[1])
        if any({c.a, c.b} == {a, b} and c.table == table for c in changes):
            raise ValueError(f"--change {spec!r}: this pair against this table is given "
                             f"twice (its test would count twice)")
        changes.append(change)
    return changes


def fine_tuning_differences(protocol: dict[str, Any], landed_protocol: Any,
                            here: dict[str, ScoresByTask], there: dict[str, ScoresByTask],
                            change: Change) -> tuple[str, ...]:
    """What else the two studies' fine-tuning differs in: each PROTOCOL field, and each
    task's learning-rate grid of either row (a row's best rate is picked from it)."""
    if not isinstance(landed_protocol, dict):
        return ("the fine-tuning protocol (the landed table does not record it)",)
    found = [k for k in PROTOCOL if protocol[k] != landed_protocol.get(k)]
    for side, name in (("a", change.a), ("b", change.b)):
        for task in sorted(set(here[side]) & set(there[side])):
            if sorted(here[side][task]) != sorted(there[side][task]):
                found.append(f"{name}'s {task} learning-rate grid")
    return tuple(found)


def change_tests(rows: list[FineTuneRow], changes: list[Change]) -> list[ChangeTest | str]:
    """Per change and every task both studies ran: B - A per fine-tuning seed at each
    row's best rate in its own study, this table's against the landed table's A0 and B0
    (scored by the same metric), Welch's t; Holm over them all. A change that cannot be
    tested gets the reason instead. Each side's differences come from one pair of
    starts, so a change speaks for these checkpoints, as the pairs do."""
    by_name = {r.name: r for r in rows}
    metric = rows[0].metric
    found: list[ChangeTest | str] = []
    for change in changes:
        where = f"--change {change.spec}"
        table = landed_table(change.table, metric, where)  # read once for both rows
        landed = {side: row_named(table, name, where)
                  for side, name in (("a", change.there_a), ("b", change.there_b))}
        there = {side: landed_scores(row, where) for side, row in landed.items()}
        here = {"a": by_name[change.a].scores, "b": by_name[change.b].scores}
        tasks = sorted(set(here["a"]) & set(here["b"]) & set(there["a"]) & set(there["b"]))
        if not tasks:
            found.append(f"{change.spec}: no task ran in both studies")
        moved = fine_tuning_differences(by_name[change.a].protocol,
                                        landed["a"].get("protocol"), here, there, change)
        for task in tasks:
            sides = []
            for scores in (here, there):
                va = scores["a"][task][best_rate(scores["a"][task])]
                vb = scores["b"][task][best_rate(scores["b"][task])]
                sides.append(tuple(vb[s] - va[s] for s in sorted(set(va) & set(vb))))
            here_d, there_d = sides
            # Welch needs spread within a side: two constant sides give a zero-width
            # interval and p = 0 however few the seeds.
            if min(len(here_d), len(there_d)) < 2 or np.var(here_d) + np.var(there_d) == 0:
                found.append(f"{change.spec} on {task}: needs two or more paired seeds on "
                             f"each side and spread within them ({len(here_d)} here, "
                             f"{len(there_d)} there)")
                continue
            diff, ci, p, df = stats.welch(list(there_d), list(here_d))
            found.append(ChangeTest(task, change, here_d, there_d, diff, ci, p, df, moved))
    tested = [c for c in found if isinstance(c, ChangeTest)]
    adjusted = iter(stats.holm([c.p for c in tested]))
    return [dataclasses.replace(c, p_holm=next(adjusted)) if isinstance(c, ChangeTest)
            else c for c in found]


def change_markdown(changes: list[ChangeTest | str], alpha: float, metric: str = "") -> str:
    lines = []
    tested = sum(isinstance(c, ChangeTest) for c in changes)
    for c in changes:
        if isinstance(c, str):
            lines.append(f"Change: not tested: {c}.")
            continue
        ch = c.change
        moved = (f" The two studies' fine-tuning differs in {', '.join(c.protocol_changes)}: "
                 f"part of what changed." if c.protocol_changes else "")
        lines.append(
            f"Change ({score_label(c.task, metric)}): {ch.b} − {ch.a} here minus "
            f"{ch.there_b} − {ch.there_a} in {ch.table} = {c.diff:+.2f} points "
            f"({np.mean(c.here):+.2f} over {len(c.here)} fine-tuning seeds here, "
            f"{np.mean(c.there):+.2f} over {len(c.there)} there; 95% Welch interval "
            f"[{c.ci[0]:+.2f}, {c.ci[1]:+.2f}], df {c.df:.1f}, p = {c.p:.2g}, Holm over "
            f"{tested} change test{'s' * (tested != 1)} p = {c.p_holm:.2g}; Welch because the "
            f"studies share no checkpoint; each side is one pair of starts, so this speaks "
            f"for these checkpoints): {c.verdict(alpha)}.{moved}")
    return "\n\n".join(lines)


# Why the trend's samples are independent, by unit.
TREND_UNITS = {
    stats.PER_SEED: "each seed's difference counts as independent: every seed draws its "
                    "own start (init=scratch)",
    stats.MEANS_PER_X: "the mean difference per x: the rows at one x share one start, so "
                       "its seeds are not independent draws of it",
}


def trend_markdown(trends: list[tuple[str, stats.TrendTest | str]], alpha: float,
                   metric: str = "") -> str:
    lines = []
    for task, t in trends:
        if isinstance(t, str):
            lines.append(f"Trend ({score_label(task, metric)}): not fitted: {t}.")
            continue
        xs = ", ".join(f"{x:g}" for x in sorted(set(t.xs)))
        lines.append(
            f"Trend ({score_label(task, metric)}): {t.label} changes by {t.slope:+.2f} points "
            f"per doubling of x (95% t interval [{t.ci[0]:+.2f}, {t.ci[1]:+.2f}], "
            f"p = {t.p:.2g}; least squares of {len(t.diffs)} {t.unit} on log2 x, "
            f"x = {xs}; one test, outside the table's Holm family; "
            f"{TREND_UNITS.get(t.unit, '')}): {t.verdict(alpha)}.")
    return "\n\n".join(lines)


def rows_markdown(rows: list[FineTuneRow]) -> str:
    """Per row and task: mean ± std at the best learning rate, n, every learning rate's
    mean (the best one marked; † when it is at the grid's edge: the grid may not bracket
    the row's best)."""
    tasks = sorted({t for r in rows for t in r.scores})
    metric = rows[0].metric
    header = ["row", "start", "attention", "params", "GFLOPs/token",
              *(f"{score_label(t, metric)} (best lr)" for t in tasks),
              *(f"{t}: mean per lr" for t in tasks)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        best, grid = [], []
        for task in tasks:
            if task not in r.scores:
                best.append("-")
                grid.append("-")
                continue
            values = list(r.at_best(task).values())
            lrs = sorted(r.scores[task])
            edge = "†" if len(lrs) > 1 and r.best_lr(task) in (lrs[0], lrs[-1]) else ""
            std = f" ± {np.std(values, ddof=1):.1f}" if len(values) > 1 else ""
            best.append(f"{np.mean(values):.1f}{std} (n={len(values)}, "
                        f"lr {r.best_lr(task):g}{edge})")
            grid.append(", ".join(
                f"{lr:g}: {np.mean(list(r.scores[task][lr].values())):.1f}"
                f" ({len(r.scores[task][lr])})" for lr in lrs))
        lines.append("| " + " | ".join([
            r.name, r.source, registry.get(r.model.attention).label(r.model), millions(r.params),
            f"{r.flops / 1e9:.3g}", *best, *grid]) + " |")
    return "\n".join(lines)


def spread_note(rows: list[FineTuneRow]) -> str:
    """What a row's spread over seeds holds: init=scratch draws every weight per seed."""
    scratch = [r.name for r in rows if r.from_scratch]
    if not scratch:
        return "One start per row, so the spread is fine-tuning noise only."
    if len(scratch) == len(rows):
        return ("Every row is trained from scratch: each seed draws its own weights, so the "
                "spread holds the init's noise as well as the data order's.")
    return (f"From scratch ({', '.join(scratch)}): each seed draws its own weights; the other "
            "rows start from one checkpoint, so their spread is fine-tuning noise only.")


def render(rows: list[FineTuneRow], tests: list[stats.PairedTest], alpha: float,
           trends: list[tuple[str, stats.TrendTest | str]] = (),
           changes: list[ChangeTest | str] = ()) -> str:
    protocol = ", ".join(f"{k}={v}" for k, v in rows[0].protocol.items() if v is not None)
    margin = tests[0].metric.margin if tests else Metric.margin
    return "\n\n".join([
        f"Fine-tuning protocol shared by every row: {protocol}.",
        rows_markdown(rows),
        "Each row at its own best learning rate (mean dev score over fine-tuning seeds; † "
        "best at the grid's edge). Pairs by fine-tuning seed. " + spread_note(rows),
        *([tables.significance_markdown(tests, "t", alpha),
           f"Verdict: Holm-corrected paired t p < {alpha:g} → better; the whole 95% t "
           f"interval inside ±{margin:g} points (the papers' effect sizes) → equivalent; else "
           "not settled. The bootstrap interval is shown from n = 10 only."] if tests else
          ["No test: " + ("one row, its scores landed for a later comparison (--row "
                          "NAME=this table.json)." if len(rows) == 1 else
                          "no pair shares a task at two or more fine-tuning seeds.")]),
        *([trend_markdown(trends, alpha, rows[0].metric)] if trends else []),
        *([change_markdown(changes, alpha, rows[0].metric)] if changes else []),
    ]) + "\n"


def to_json(rows: list[FineTuneRow], tests: list[stats.PairedTest], alpha: float,
            trends: list[tuple[str, stats.TrendTest | str]] = (),
            changes: list[ChangeTest | str] = ()) -> str:
    landed: dict[str, Any] = {
        "metric": rows[0].metric or "main",
        "rows": [{"name": r.name, "workdir": r.workdir, "source": r.source,
                  "attention": registry.get(r.model.attention).label(r.model), "params": r.params,
                  "flops_per_token": r.flops, "protocol": r.protocol,
                  "model": r.model.to_dict(), "landed_in": r.landed_in,
                  "scores": {t: {str(lr): {str(s): v for s, v in by_seed.items()}
                                 for lr, by_seed in by_lr.items()}
                             for t, by_lr in r.scores.items()}} for r in rows],
        "tests": [{"task": t.metric.key, "a": t.a, "b": t.b, "over": t.over,
                   "seeds": list(t.seeds), "diff": t.diff, "ci": list(t.ci), "p_t": t.p_t,
                   "p_wilcoxon": t.p_wilcoxon, "p_holm": t.p_holm,
                   "verdict": t.verdict("t", alpha)} for t in tests],
        "trends": [{"task": task, "not_fitted": t} if isinstance(t, str) else
                   {"task": task, "label": t.label, "x": list(t.xs), "diffs": list(t.diffs),
                    "unit": t.unit, "slope_per_doubling": t.slope, "ci": list(t.ci),
                    "p": t.p, "verdict": t.verdict(alpha)} for task, t in trends],
    }
    if changes:  # tables written without --change keep their layout
        landed["changes"] = [
            {"not_tested": c} if isinstance(c, str) else
            {"task": c.task, "a": c.change.a, "b": c.change.b, "against": c.change.table,
             "there_a": c.change.there_a, "there_b": c.change.there_b,
             "here": list(c.here), "there": list(c.there), "diff": c.diff, "ci": list(c.ci),
             "df": c.df, "p_welch": c.p, "p_holm": c.p_holm,
             "fine_tuning_differs_in": list(c.protocol_changes),
             "verdict": c.verdict(alpha)} for c in changes]
    return json.dumps(landed, indent=1)
