"""A sweep's results as the papers' tables (markdown, CSV) with the paired tests
(analysis/stats.py) and their notes; `collect` reads a sweep, `render` writes it.
"""

from __future__ import annotations

import csv
import io

import numpy as np

from analysis import sweep_grids
from analysis.plots import attention_label
from analysis.runs import (
    MLM_METRICS,
    PAPER_COLUMNS,
    SQUAD_F1,
    Metric,
    RowResult,
    Stat,
    Table,
    add_model_stats,
    build_metrics,
    first_step_reaching,
    from_scratch,
    load_rows,
    read_row,
    rows_location,
    scalar_curve,
    trained_vocabularies,
)
from analysis.stats import MIN_BOOTSTRAP_N, PairedTest, run_tests
from configs import grids


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
    return (f"{sweep_grids.millions(a[0])} → {sweep_grids.millions(b[0])} "
            f"({b[0] / a[0]:.2f}x), {a[1] / 1e9:.3g} → {b[1] / 1e9:.3g} ({b[1] / a[1]:.2f}x)")


def significance_markdown(tests: list[PairedTest], test: str, alpha: float) -> str:
    # Holm's family: the tests with a p-value (a pair without variance has none).
    family = sum(not np.isnan(t.p(test)) for t in tests)
    header = ["metric", "A", "B", "paired over", "n", "mean A", "mean B", "B − A",
              "95% CI (paired t)", "95% CI (bootstrap)", "p (paired t)", "p (Wilcoxon)",
              f"p ({'t' if test == 't' else 'Wilcoxon'}, Holm over {family})",
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
        f"(±m)\" when the whole 95% paired t interval lies inside ±m (m: 0.5 points for scores "
        f"and MLM accuracy, 0.02 nats for MLM loss); else \"not settled\". A pair with fewer "
        f"than two paired seeds is not tested. The bootstrap interval is shown from "
        f"n = {MIN_BOOTSTRAP_N} pairs on (below it undercovers: at n = 3 it is [min, max], "
        f"about 75%). Cost: parameters without the MLM head and forward GFLOPs per token, "
        f"A → B, so \"at equal parameters\" is not read as \"at equal cost\".")
    return "\n\n".join(lines)



def collect(out: str, grid: str | None = None, grid_file: str | None = None,
            steps_to: tuple[Metric, ...] = ()) -> Table:
    """Reads every row's runs and builds its model statistics; `steps_to` columns follow
    the MLM ones."""
    out, only = rows_location(out, grid, grid_file)
    label, rows, manifest = load_rows(out, grid, grid_file, only)
    results = [read_row(out, row) for row in rows]
    paper_vocab = any("params_m" in row.reported for row in rows)
    trained_vocab = trained_vocabularies(results)
    for result in results:
        add_model_stats(result, manifest, paper_vocab, trained_vocab)
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
