"""Every verdict of docs/RESULTS.md tested again from the files under docs/results/, with
one multiplicity policy (RESULTS' "How to read a verdict"):

- a **family** is one table (the tests the table prints; a trend, a Fisher test or a
  comparison across tables is a family of its own): Holm's correction within it, as
  every part reports;
- beside it, **one project-wide family**: every distinct test behind a verdict of the
  document (the superseded first readings kept for the record are not verdicts and are
  left out), Holm over all of them;
- **equivalence** at the margins of the papers' effect sizes: 0.5 points for dev scores
  and accuracies (the low-rank paper's Table 1 differences are about 0.5 points), 0.02
  nats of MLM loss, none for steps; the verdict the old 1-point margin gave beside it.

Pairing follows the rule: paired t by seed where both arms share the draw that seed
makes (the same pretraining seed, or the same encoder and the same fine-tuning seed);
Welch's t (scipy.stats.ttest_ind, equal_var=False) where one arm draws its encoder per
seed and the other starts from one checkpoint, or the two are different models
(MiniLM against this repository's width-64 model).

  python scripts/holm_all_verdicts.py                 # prints the markdown
  python scripts/holm_all_verdicts.py --out docs/results/holm_all_verdicts   # .json, .md
  python scripts/holm_all_verdicts.py --pending \
      --out docs/results/holm_all_verdicts_pending   # what if the unfinished tables joined

A declared design whose tables are still filling (PENDING) joins the project-wide family
when it is complete, so that every project-wide p quoted in RESULTS moves once, not at
each landing; --pending shows now what its tests would do to that family (a what-if
beside the document's family, never the family itself).

Tests come from the project's own functions (analysis/stats.py: tests_from_csv,
paired_test, holm, difference_trend); the p-values of every paired table match its
file's.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import sys
from typing import Any

import numpy as np
import scipy.stats

from analysis import stats
from analysis.stats import welch
from common.files import write_json_atomic, write_text_atomic

ALPHA = 0.05
# Equivalence margins (RESULTS' rule): the papers' effect sizes, not a flat 1 point.
MARGINS = {"points": 0.5, "nats": 0.02, "steps": None}
OLD_MARGINS = {"points": 1.0, "nats": 0.02, "steps": None}

# Kept in docs/results/ for the record, superseded by a rerun: not verdicts of RESULTS.
SUPERSEDED = {
    "text_small/three_seeds_2026-12-01": "part 2's first reading at 3 seeds, rerun at 5",
    "classifier_question/three_seeds_2026-12-01": "part 3's first reading at 3 seeds, "
                                                  "rerun at 5",
    "why_pretraining": "part 6's first reading at 3 fine-tuning seeds, rerun at 5",
}


# A declared design not complete yet, table by table (part, folder under docs/results/,
# what it waits for): out of the project-wide family until the design is complete;
# --pending counts them in as they stand.
PENDING = (
    ("10", "head_counts_pretrained_prebest", "the rest of part 10; its 6 tests are in"),
    ("10", "head_counts_pretrained_prebest_stsb", "the rest of part 10; its 6 tests are in"),
    ("10", "head_counts_pretrained_prebest_seed1", "the 96-head rows"),
    ("10", "head_counts_pretrained_prebest_seed1_stsb", "the 96-head rows"),
    ("10", "head_counts_pretrained_prebest_seed1_mrpc", "the rest of part 10; final, MRPC "
     "gave way to STS-B"),
    ("10", "head_counts_pretrained_prebest_seed1_mrpc/accuracy", "the rest of part 10; MRPC's "
     "accuracy beside its F1"),
)


@dataclasses.dataclass
class Check:
    """One test behind one verdict."""
    part: str
    family: str  # the table (Holm within it)
    a: str
    b: str
    metric: str
    unit: str  # points | nats | steps (the margin's unit), or "" (no equivalence)
    test: str  # paired t | Welch t | trend | Fisher exact | ..., difference in differences
    n: str
    diff: float  # B - A (a trend: its slope per doubling)
    ci: tuple[float, float] | None
    p: float  # nan: no p (no variance)
    source: str
    higher_is_better: bool = True
    cost: str = ""
    key: str = ""  # the same test in two tables counts once project-wide
    p_table: float = float("nan")
    p_project: float = float("nan")

    def verdict(self, p_adjusted: float, margins: dict[str, float | None] = MARGINS) -> str:
        if p_adjusted < ALPHA:
            if self.test == "trend" or self.test.endswith("difference in differences"):
                return "differs from 0 (" + ("+" if self.diff > 0 else "−") + ")"
            return f"{self.b if (self.diff > 0) == self.higher_is_better else self.a} better"
        margin = margins.get(self.unit) if self.unit else None
        if margin is not None and self.ci is not None and -margin < self.ci[0] \
                and self.ci[1] < margin:
            return f"equivalent (±{margin:g})"
        return "not settled"


# -- tests --------------------------------------------------------------------------------
def unit_of(metric: str) -> str:
    return "nats" if metric == "MLM loss" else "steps" if metric.startswith("steps") else "points"


def cost_text(cost_a: tuple[Any, Any], cost_b: tuple[Any, Any]) -> str:
    (pa, fa), (pb, fb) = cost_a, cost_b
    if None in (pa, pb, fa, fb):
        return ""
    return (f"{pa / 1e6:.3g}M → {pb / 1e6:.3g}M params ({pb / pa:.2f}x), "
            f"{fa / 1e6:.3g} → {fb / 1e6:.3g} MFLOPs/token ({fb / fa:.2f}x)")


def values_key(metric: str, a: str, b: str, va: Any, vb: Any) -> str:
    return json.dumps([metric, a, b, [round(float(v), 9) for v in va],
                       [round(float(v), 9) for v in vb]])


def from_csv(results: str, part: str, name: str) -> list[Check]:
    """A tables.py significance.csv, every pair tested again (stats.tests_from_csv)."""
    path = os.path.join(results, name, "significance.csv")
    out = []
    for t in stats.tests_from_csv(path):
        out.append(Check(part, name, t.a, t.b, t.metric.name, unit_of(t.metric.name),
                         "paired t", f"{len(t.seeds)} pretraining seeds", t.diff, t.ci, t.p_t,
                         f"docs/results/{name}/significance.csv", t.metric.higher_is_better,
                         cost_text(t.cost_a, t.cost_b),
                         values_key(t.metric.name, t.a, t.b, t.values_a, t.values_b)))
    return out


def csv_values(results: str, name: str) -> dict[tuple[str, str], dict[str, list[float]]]:
    """{(metric, row): {seed: value}} of every row a significance.csv holds."""
    values: dict[tuple[str, str], dict[str, list[float]]] = {}
    with open(os.path.join(results, name, "significance.csv"), newline="") as f:
        for r in csv.DictReader(f):
            seeds = r["seeds"].split()
            for row, column in ((r["a"], "values_a"), (r["b"], "values_b")):
                values.setdefault((r["metric"], row), {}).update(
                    zip(seeds, map(float, r[column].split()), strict=True))
    return values


def read_json(results: str, name: str) -> dict[str, Any]:
    with open(os.path.join(results, name, "table.json")) as f:
        return json.load(f)


def at_lr(row: dict[str, Any], task: str, lr: float | None = None
          ) -> tuple[float, dict[int, float]]:
    """(the learning rate, {fine-tuning seed: dev score}) at lr, or at the row's best one
    (the best mean over seeds, the first of equal ones: analysis/finetune_compare.py)."""
    by_lr = {float(k): {int(s): float(v) for s, v in seeds.items()}
             for k, seeds in row["scores"][task].items()}
    if lr is None:
        lr = max(sorted(by_lr), key=lambda x: np.mean(list(by_lr[x].values())))
    return lr, by_lr[lr]


def from_finetune_json(results: str, part: str, name: str, welch_pairs: set[tuple[str, str]]
                       = frozenset()) -> list[Check]:
    """A compare_finetuning.py table.json's pairs, each row at its best rate: paired t by
    fine-tuning seed, or Welch's t for the pairs in welch_pairs (no shared encoder draw)."""
    table = read_json(results, name)
    rows = {r["name"]: r for r in table["rows"]}
    metric_name = table.get("metric", "main")
    out = []
    for t in table["tests"]:
        a, b, task = rows[t["a"]], rows[t["b"]], t["task"]
        (lr_a, va), (lr_b, vb) = at_lr(a, task), at_lr(b, task)
        metric = task if metric_name in ("main", None) else f"{task} {metric_name}"
        cost = cost_text((a["params"], a["flops_per_token"]), (b["params"], b["flops_per_token"]))
        if (t["a"], t["b"]) in welch_pairs:
            diff, ci, p, df = welch(list(va.values()), list(vb.values()))
            out.append(Check(part, name, t["a"], t["b"], metric, "points", "Welch t",
                             f"{len(va)} + {len(vb)} fine-tuning seeds (lr {lr_a:g} vs "
                             f"{lr_b:g}; df {df:.1f})", diff, ci, p,
                             f"docs/results/{name}/table.json", cost=cost))
            continue
        seeds = sorted(set(va) & set(vb))
        done = stats.paired_test(stats.Metric(metric, "task", task), t["a"], t["b"], "", seeds,
                                 [va[s] for s in seeds], [vb[s] for s in seeds], 10_000)
        out.append(Check(part, name, t["a"], t["b"], metric, "points", "paired t",
                         f"{len(seeds)} fine-tuning seeds (lr {lr_a:g} vs {lr_b:g})",
                         done.diff, done.ci, done.p_t,
                         f"docs/results/{name}/table.json", cost=cost,
                         key=values_key(metric, t["a"], t["b"], done.values_a, done.values_b)))
    return out


def trend_from_json(results: str, part: str, name: str) -> list[Check]:
    """The table's trend (B - A on log2 x), fitted again from its recorded differences."""
    out = []
    for t in read_json(results, name).get("trends") or []:
        points: dict[float, list[float]] = {}
        for x, d in zip(t["x"], t["diffs"], strict=True):
            points.setdefault(float(x), []).append(float(d))
        # A table written before trends named their unit regressed per-seed differences.
        fit = stats.difference_trend(t["label"], sorted(points.items()),
                                     t.get("unit", stats.PER_SEED))
        out.append(Check(part, f"{name} (trend)", "", t["label"], f"{t['task']} trend",
                         "", "trend", f"{len(fit.diffs)} {fit.unit}", fit.slope, fit.ci, fit.p,
                         f"docs/results/{name}/table.json"))
    return out


# -- the tests RESULTS adds (issue 49) ----------------------------------------------------
def part1_across_head_counts(results: str) -> list[Check]:
    """8 vs 32 heads on the 400-step clock, seeds 0-4 (the two follow-ups' files): the
    slowdown itself, and whether key size 32 / talking heads remove more of it at 32
    heads (the difference of their gains, per seed: an interaction)."""
    steps = "steps to eval_accuracy>=0.99"
    h32 = csv_values(results, "synthetic_find_speed")
    h8 = csv_values(results, "synthetic_find_speed_h8")
    seeds = sorted(h32[(steps, "syn_mh_h32")], key=int)
    get = lambda table, row: np.array([table[(steps, row)][s] for s in seeds])  # noqa: E731
    mh8, mh32 = get(h8, "syn_mh_h8"), get(h32, "syn_mh_h32")
    source = ("docs/results/synthetic_find_speed/significance.csv, "
              "docs/results/synthetic_find_speed_h8/significance.csv")
    family = "part 1: 8 vs 32 heads (across the two follow-ups)"
    done = stats.paired_test(stats.Metric(steps, "steps_to", higher_is_better=False,
                                          margin=None), "syn_mh_h8", "syn_mh_h32", "", seeds,
                             list(mh8), list(mh32), 10_000)
    out = [Check("1", family, "syn_mh_h8", "syn_mh_h32", steps, "steps", "paired t",
                 f"{len(seeds)} pretraining seeds", done.diff, done.ci, done.p_t, source,
                 higher_is_better=False)]
    for fix8, fix32, label in (("syn_mh_k32_h8", "syn_mh_k32_h32", "key size 32's"),
                               ("syn_th_h8", "syn_th_h32", "talking heads'")):
        gain8, gain32 = get(h8, fix8) - mh8, get(h32, fix32) - mh32
        d = gain32 - gain8
        t = scipy.stats.ttest_1samp(d, 0.0)
        half = float(scipy.stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d)))
        out.append(Check("1", family, f"{label} gain at 8 heads",
                         f"{label} gain at 32 heads", steps, "",
                         "paired t, difference in differences", f"{len(d)} pretraining seeds",
                         float(d.mean()), (float(d.mean()) - half, float(d.mean()) + half),
                         float(t.pvalue), source))
    return out


def part8_3000_across(results: str) -> list[Check]:
    """Part 8 on the 3000-step clock (issue 49's experiment 4): the 2- and 8-head rows
    (synthetic_mode_3000_h2h8) against 32 heads of key size 2 (synthetic_mode_3000), paired
    by pretraining seed: the same corpus and seed give the same batch order, and the
    three rows have equal parameters and FLOPs."""
    few = csv_values(results, "synthetic_mode_3000_h2h8")
    many = csv_values(results, "synthetic_mode_3000")
    source = ("docs/results/synthetic_mode_3000_h2h8/significance.csv, "
              "docs/results/synthetic_mode_3000/significance.csv")
    family = "part 8: 2 and 8 vs 32 heads at 3000 steps (across the two folders)"
    out = []
    for metric, higher in (("MLM loss", False), ("MLM acc", True)):
        b = many[(metric, "mode_mh_h32")]
        for row in ("mode_mh_h2", "mode_mh_h8"):
            a = few[(metric, row)]
            seeds = sorted(set(a) & set(b), key=int)
            t = stats.paired_test(stats.Metric(metric, "mlm", higher_is_better=higher),
                                  row, "mode_mh_h32", "", seeds, [a[s] for s in seeds],
                                  [b[s] for s in seeds], 10_000)
            out.append(Check("8", family, row, "mode_mh_h32", metric, unit_of(metric),
                             "paired t", f"{len(seeds)} pretraining seeds", t.diff, t.ci,
                             t.p_t, source, higher, "equal parameters and FLOPs (0.117M, "
                             "0.217 MFLOPs/token)"))
    return out


def part3_scratch_vs_pretrained(results: str) -> list[Check]:
    """From scratch vs the pretrained checkpoints at the same rate (1e-3), five pretraining
    seeds (each the mean of 3 fine-tuning seeds): a scratch row draws its own weights,
    so Welch's t."""
    values = csv_values(results, "classifier_question")
    out = []
    for attention in ("mh", "th"):
        a, b = f"cls_{attention}_lr0.001", f"cls_{attention}_scratch"
        va, vb = list(values[("SST-2", a)].values()), list(values[("SST-2", b)].values())
        diff, ci, p, df = welch(va, vb)
        out.append(Check("3", "part 3: scratch vs pretrained at 1e-3", a, b, "SST-2", "points",
                         "Welch t", f"5 + 5 pretraining seeds (df {df:.1f})", diff, ci, p,
                         "docs/results/classifier_question/significance.csv"))
    return out


def part6_rate(results: str) -> list[Check]:
    """Does moving each row from 1e-3 to its own best rate shrink the checkpoint's gap to
    scratch? Per checkpoint: (its best − its 1e-3) against scratch's (best − 1e-3), each
    paired within its row by fine-tuning seed, the two rows independent: Welch's t.
    The gap's change is gap(best) − gap(1e-3)."""
    rows = {r["name"]: r for r in read_json(results, "why_pretraining_5")["rows"]}
    lr_s, best_s = at_lr(rows["scratch"], "SST-2")
    low_s = at_lr(rows["scratch"], "SST-2", 1e-3)[1]
    gain_s = [best_s[k] - low_s[k] for k in sorted(best_s)]
    out = []
    for name in [n for n in rows if n != "scratch"]:
        best = at_lr(rows[name], "SST-2")[1]
        low = at_lr(rows[name], "SST-2", 1e-3)[1]
        gain = [best[k] - low[k] for k in sorted(best)]
        diff, ci, p, df = welch(gain_s, gain)
        out.append(Check("6", "part 6: the rate's share of the gap", "scratch (1e-3 → best)",
                         f"{name} (1e-3 → best)", "SST-2 gain from the rate", "",
                         "Welch t, difference in differences",
                         f"5 + 5 fine-tuning seeds (df {df:.1f})", diff, ci, p,
                         "docs/results/why_pretraining_5/table.json"))
    return out


def part6_rate_shares(results: str) -> dict[str, dict[str, float]]:
    """Descriptive: each checkpoint's gap to scratch at 1e-3 and at both rows' best rates,
    and the share of the 1e-3 gap the rate removes (means; one pretraining seed)."""
    rows = {r["name"]: r for r in read_json(results, "why_pretraining_5")["rows"]}
    mean = lambda v: float(np.mean(list(v.values())))  # noqa: E731
    s_best = mean(at_lr(rows["scratch"], "SST-2")[1])
    s_low = mean(at_lr(rows["scratch"], "SST-2", 1e-3)[1])
    shares = {}
    for name in [n for n in rows if n != "scratch"]:
        gap_low = mean(at_lr(rows[name], "SST-2", 1e-3)[1]) - s_low
        gap_best = mean(at_lr(rows[name], "SST-2")[1]) - s_best
        shares[name] = {"gap_at_1e-3": gap_low, "gap_at_best": gap_best,
                        "share_removed": 1 - gap_best / gap_low}
    return shares


def part7_pretrained_vs_scratch(results: str) -> list[Check]:
    """Part 7's observation beside its tables: each row pretrained (1000 steps) vs the
    same row from scratch, at 1e-3, five fine-tuning seeds each: different encoders per
    seed, so Welch's t (it was paired by fine-tuning seed)."""
    scratch = {r["name"]: r for r in read_json(results, "head_counts_scratch")["rows"]}
    pre = {r["name"]: r for r in read_json(results, "head_counts_pretrained")["rows"]}
    out = []
    for name in scratch:
        va = list(at_lr(scratch[name], "SST-2", 1e-3)[1].values())
        vb = list(at_lr(pre[name], "SST-2", 1e-3)[1].values())
        diff, ci, p, df = welch(va, vb)
        out.append(Check("7", "part 7: pretrained vs from scratch at 1e-3",
                         f"{name} from scratch", f"{name} pretrained", "SST-2", "points",
                         "Welch t", f"5 + 5 fine-tuning seeds (df {df:.1f})", diff, ci, p,
                         "docs/results/head_counts_scratch/table.json, "
                         "docs/results/head_counts_pretrained/table.json"))
    return out


def part5_fisher(results: str) -> list[Check]:
    """Solved (held-out accuracy >= 99% at step 400) on how many of five seeds: 2 heads of
    key size 32 vs 32 of key size 2, Fisher's exact test."""
    values = csv_values(results, "synthetic_fixed_params")
    solved = {row: sum(v >= 99.0 for v in values[("MLM acc", row)].values())
              for row in ("syn_mh_h2", "syn_mh_h32")}
    n = len(values[("MLM acc", "syn_mh_h2")])
    p = float(scipy.stats.fisher_exact([[solved["syn_mh_h2"], n - solved["syn_mh_h2"]],
                                        [solved["syn_mh_h32"], n - solved["syn_mh_h32"]]]).pvalue)
    return [Check("5", "part 5: solve rate (Fisher)", "syn_mh_h2", "syn_mh_h32",
                  "solved by step 400", "", "Fisher exact",
                  f"{solved['syn_mh_h2']}/{n} vs {solved['syn_mh_h32']}/{n}",
                  (solved["syn_mh_h32"] - solved["syn_mh_h2"]) / n, None, p,
                  "docs/results/synthetic_fixed_params/significance.csv")]


# SST-2 dev: 444 of its 872 sentences are positive, so a classifier that predicts the
# majority class for every sentence scores exactly this.
SST2_MAJORITY = 100 * 444 / 872
PART9_FRESH_SEEDS = range(5, 10)  # declared before these ran, from what seeds 0-4 showed
PART9_RATES = (3e-4, 1e-3, 3e-3)  # the grid every row shares (model_std's 1e-2 left out)


def majority_runs(row: dict[str, Any], task: str = "SST-2") -> tuple[int, int]:
    """(runs at the majority class, runs) over PART9_FRESH_SEEDS x PART9_RATES; a run
    missing from the row is an error, not a smaller count."""
    values = [at_lr(row, task, lr)[1][seed] for lr in PART9_RATES
              for seed in PART9_FRESH_SEEDS]
    return sum(abs(v - SST2_MAJORITY) < 1e-6 for v in values), len(values)


def part9_majority_fisher(results: str) -> list[Check]:
    """Runs that never leave the majority class, the N(0, 0.02) mixing (slip_model_std)
    against multi-head at 48 and 96 heads, on the fresh seeds only: Fisher's exact test,
    as RESULTS part 9 declared before those seeds ran."""
    rows = {r["name"]: r for r in read_json(results, "th_slips_scratch")["rows"]}
    out = []
    for heads in (48, 96):
        a, b = f"mh_h{heads}", f"slip_model_std_h{heads}"
        (stuck_a, n_a), (stuck_b, n_b) = majority_runs(rows[a]), majority_runs(rows[b])
        p = float(scipy.stats.fisher_exact([[stuck_a, n_a - stuck_a],
                                            [stuck_b, n_b - stuck_b]]).pvalue)
        out.append(Check("9", "part 9: runs at the majority class, seeds 5-9 (Fisher)", a, b,
                         "share of runs at SST-2's majority class", "", "Fisher exact",
                         f"{stuck_a}/{n_a} vs {stuck_b}/{n_b}", stuck_b / n_b - stuck_a / n_a,
                         None, p, "docs/results/th_slips_scratch/table.json",
                         higher_is_better=False))
    return out


def part6_minilm_cost(results: str) -> dict[str, float]:
    """MiniLM against the small model on part 6's protocol (64 tokens): parameters and
    forward FLOPs per token from the table (models/flops.py's count)."""
    rows = {r["name"]: r for r in read_json(results, "why_pretraining_5/reference")["rows"]}
    small, minilm = rows["scratch"], rows["reference"]
    return {"params_small": small["params"], "params_minilm": minilm["params"],
            "flops_small": small["flops_per_token"], "flops_minilm": minilm["flops_per_token"],
            "params_ratio": minilm["params"] / small["params"],
            "flops_ratio": minilm["flops_per_token"] / small["flops_per_token"]}


# -- the document ------------------------------------------------------------------------
def collect(results: str, pending: bool = False) -> list[Check]:
    """Every test behind a verdict of RESULTS, family by family, in the document's order;
    with pending, the PENDING tables' tests after them (a what-if)."""
    welch6 = {("scratch", f"step{s}") for s in range(500, 3001, 500)}
    checks = [
        *from_csv(results, "1", "synthetic_find"),
        *from_csv(results, "1", "synthetic_find_speed"),
        *from_csv(results, "1", "synthetic_find_speed_h8"),
        *part1_across_head_counts(results),
        *from_csv(results, "2", "text_small"),
        *from_csv(results, "3", "classifier_question"),
        *part3_scratch_vs_pretrained(results),
        *from_finetune_json(results, "4", "minilm_insert"),
        *from_finetune_json(results, "4", "minilm_insert_mrpc"),
        *from_finetune_json(results, "4", "minilm_insert_mrpc/accuracy"),
        *from_csv(results, "5", "synthetic_fixed_params"),
        *part5_fisher(results),
        *from_finetune_json(results, "6", "why_pretraining_5", welch6),
        *trend_from_json(results, "6", "why_pretraining_5"),
        *part6_rate(results),
        *from_finetune_json(results, "6", "why_pretraining_5/reference",
                            {("scratch", "reference"), ("step3000", "reference")}),
        *from_finetune_json(results, "6", "why_pretraining_5/long12000",
                            {("scratch", "long12000")}),
        *from_finetune_json(results, "7", "head_counts_scratch"),
        *trend_from_json(results, "7", "head_counts_scratch"),
        *from_finetune_json(results, "7", "head_counts_pretrained"),
        *trend_from_json(results, "7", "head_counts_pretrained"),
        *part7_pretrained_vs_scratch(results),
        *from_csv(results, "8", "synthetic_mode"),
        *from_csv(results, "8", "synthetic_mode_3000"),
        *from_csv(results, "8", "synthetic_mode_3000_h2h8"),
        *part8_3000_across(results),
        *from_finetune_json(results, "9", "th_slips_scratch"),
        *part9_majority_fisher(results),
        *from_csv(results, "appendix", "talking_heads_cpu"),
        *from_csv(results, "appendix", "key_size_cpu"),
    ]
    if pending:
        for part, name, _ in PENDING:
            checks += from_finetune_json(results, part, name)
    for i, c in enumerate(checks):
        c.key = c.key or f"{c.family}#{i}"
    return adjust(checks)


def adjust(checks: list[Check]) -> list[Check]:
    """Holm within each family, and over the distinct tests of all of them."""
    families: dict[str, list[Check]] = {}
    for c in checks:
        families.setdefault(c.family, []).append(c)
    for members in families.values():
        for c, p in zip(members, stats.holm([c.p for c in members]), strict=True):
            c.p_table = p
    distinct = {c.key: c.p for c in checks}
    adjusted = dict(zip(distinct, stats.holm(list(distinct.values())), strict=True))
    for c in checks:
        c.p_project = adjusted[c.key]
    return checks


def project_family_size(checks: list[Check]) -> int:
    return sum(not np.isnan(p) for p in {c.key: c.p for c in checks}.values())


def fmt_p(p: float) -> str:
    return "-" if np.isnan(p) else f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def fmt_diff(c: Check) -> str:
    d = 3 if c.unit == "nats" else 0 if c.unit == "steps" else 2
    ci = f" [{c.ci[0]:+.{d}f}, {c.ci[1]:+.{d}f}]" if c.ci else ""
    return f"{c.diff:+.{d}f}{ci}"


def report(checks: list[Check], results: str) -> dict[str, Any]:
    families: dict[str, int] = {}
    for c in checks:
        families[c.family] = families.get(c.family, 0) + (not np.isnan(c.p))
    pending_counted = any(name in families for _, name, _ in PENDING)
    return {
        "policy": {"alpha": ALPHA, "family": "one table (a trend, a Fisher test or a "
                   "comparison across tables: its own family)", "project_family":
                   "every distinct test behind a verdict of docs/RESULTS.md",
                   "margins": MARGINS, "old_margins": OLD_MARGINS},
        "project_family_size": project_family_size(checks),
        "families": families,
        "superseded_not_counted": SUPERSEDED,
        "pending": {"counted": pending_counted, "tables": {f"part {part}, {name}": missing
                                                    for part, name, missing in PENDING}},
        "tests": [{**dataclasses.asdict(c), "family_size": families[c.family],
                   "verdict_table": c.verdict(c.p_table),
                   "verdict_project": c.verdict(c.p_project),
                   "verdict_table_old_margin": c.verdict(c.p_table, OLD_MARGINS)}
                  for c in checks],
        "survive_project_wide": [f"part {c.part}, {c.family}: {c.metric}, {c.a} vs {c.b}"
                                 for c in checks if c.p_project < ALPHA],
        "part6_rate_shares": part6_rate_shares(results),
        "part6_minilm_cost": part6_minilm_cost(results),
    }


def markdown(rep: dict[str, Any]) -> str:
    m = rep["project_family_size"]
    pending = rep["pending"]
    if pending["counted"]:
        head = ["A what-if, not the document's family: every verdict of docs/RESULTS.md "
                "with the declared tables that are not complete yet counted in as they "
                "stand (`python scripts/holm_all_verdicts.py --pending --out "
                "docs/results/holm_all_verdicts_pending`)."]
    else:
        head = ["Every verdict of docs/RESULTS.md, tested again from docs/results/ "
                "(`python scripts/holm_all_verdicts.py --out docs/results/holm_all_verdicts`)."]
    lines = [
        *head,
        "",
        ("Counted in" if pending["counted"] else "Not counted until complete") + ": "
        + "; ".join(f"{k} (waits for {v})" for k, v in pending["tables"].items()) + ".",
        "",
        f"Holm within each table (its family, m tests) and over the whole document "
        f"({m} distinct tests with a p-value; a test printed in two tables counts once). "
        f"Verdict: Holm p < {ALPHA} → better; the whole 95% interval inside the margin "
        f"(±{MARGINS['points']:g} points, ±{MARGINS['nats']:g} nats, none for steps) → "
        f"equivalent; else not settled. \"±1 margin\": the verdict under the old 1-point "
        f"margin, where it differs. Superseded first readings are not counted: "
        + "; ".join(f"{k} ({v})" for k, v in rep["superseded_not_counted"].items()) + ".",
        "",
        "| part | family (m) | metric | A | B | test, n | B − A [95% CI] | p | Holm, table "
        f"| Holm, project ({m}) | verdict (table Holm) | verdict (project Holm) | ±1 margin | "
        "cost A → B |",
        "|" + "---|" * 14,
    ]
    for t in rep["tests"]:
        c = Check(**{k: (tuple(v) if k == "ci" and v is not None else v)
                     for k, v in t.items() if k in {f.name for f in dataclasses.fields(Check)}})
        old = t["verdict_table_old_margin"]
        lines.append("| " + " | ".join([
            t["part"], f"{t['family']} ({t['family_size']})", t["metric"], t["a"], t["b"],
            f"{t['test']}, {t['n']}", fmt_diff(c), fmt_p(t["p"]), fmt_p(t["p_table"]),
            fmt_p(t["p_project"]), t["verdict_table"], t["verdict_project"],
            old if old != t["verdict_table"] else "", t["cost"]]) + " |")
    lines += ["", f"Surviving Holm over all {m}: " + "; ".join(rep["survive_project_wide"]) + "."]
    shares = rep["part6_rate_shares"]
    lines += ["", "Part 6, descriptive (means over 5 fine-tuning seeds, one pretraining): "
              "checkpoint − scratch at 1e-3 → at both rows' best rates, share of the 1e-3 "
              "gap removed: " + "; ".join(
                  f"{k} {v['gap_at_1e-3']:+.1f} → {v['gap_at_best']:+.1f} "
                  f"({100 * v['share_removed']:.0f}%)" for k, v in shares.items()) + "."]
    cost = rep["part6_minilm_cost"]
    lines += ["", f"Part 6's MiniLM against the small model at 64 tokens: "
              f"{cost['params_minilm']:,} vs {cost['params_small']:,} parameters "
              f"({cost['params_ratio']:.1f}x), {cost['flops_minilm']:,.0f} vs "
              f"{cost['flops_small']:,.0f} forward FLOPs per token "
              f"({cost['flops_ratio']:.1f}x; per fine-tuning step the same ratio at equal "
              f"tokens per step, training being 3x the forward pass for both)."]
    return "\n".join(lines) + "\n"


def without_nan(value: Any) -> Any:
    """JSON has no NaN: a test without a p-value (no variance) gets null."""
    if isinstance(value, dict):
        return {k: without_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [without_nan(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if np.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def main(argv: list[str]) -> int:
    out, results, pending = None, "docs/results", False
    args = argv[1:]
    while args:
        flag = args.pop(0)
        if flag == "--pending":
            pending = True
        elif flag in ("--out", "--results") and args:
            value = args.pop(0)
            out, results = (value, results) if flag == "--out" else (out, value)
        else:
            print("usage: python scripts/holm_all_verdicts.py [--results DIR] [--out PREFIX] "
                  "[--pending]", file=sys.stderr)
            return 1
    try:
        rep = report(collect(results, pending), results)
    except (OSError, KeyError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    text = markdown(rep)
    if out:
        write_json_atomic(out + ".json", without_nan(rep))
        write_text_atomic(out + ".md", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
