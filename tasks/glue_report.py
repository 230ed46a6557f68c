"""GLUE results as the BERT paper's table: eval_glue.py's results.md.

One row (the fine-tuned model), one column per score in the BERT table's task
order (MNLI as -m and -mm), each `mean ± std` over fine-tuning seeds at the best
learning rate, then the GLUE average (glue.metrics.glue_average) when every task it
needs is there, else the mean of the tasks present without WNLI, named as not
GLUE's. The numbers come from results.json's records (training/results.py); a
sweep's many-row tables with significance tests are scripts/tables.py's.
"""

from __future__ import annotations

import os

import numpy as np

from common.files import write_text_atomic
from glue.metrics import glue_average
from glue.tasks import TASKS
from training.results import RESULTS_MARKDOWN, FineTuningResults


def markdown_table(results: FineTuningResults, label: str) -> str:
    columns: list[str] = []
    cells: dict[str, str] = {}
    mains: dict[str, float] = {}
    for task_name in sorted(results.tasks, key=list(TASKS).index):  # the BERT table's order
        summary = results.tasks[task_name]
        for name, value in summary.main.items():
            columns.append(name)
            # One seed has no spread: "± 0.0" would claim one.
            spread = f" ± {summary.main_score(name).std:.1f}" if len(summary.seeds) > 1 else ""
            mark = MAJORITY_MARK if summary.at_or_below_majority(name) else ""
            cells[name] = f"{value:.1f}{spread}{mark}"
            mains[name] = value
    try:
        average = f"{glue_average(mains):.1f}"
        average_name = "Average"
    except ValueError:
        present = [v for k, v in mains.items() if k != "WNLI"]
        average = f"{np.mean(present):.1f}" if present else "-"
        average_name = f"Average of {len(present)} tasks (not GLUE's)"
    header = "| model | " + " | ".join(columns) + f" | {average_name} |"
    rule = "|---" * (len(columns) + 2) + "|"
    row = f"| {label} | " + " | ".join(cells[c] for c in columns) + f" | {average} |"
    return "\n".join([header, rule, row, *footnotes(results)])


MAJORITY_MARK = " †"


def footnotes(results: FineTuningResults) -> list[str]:
    """The lines under the table: single-seed tasks, and scores at or below the
    majority-class baseline (the model learned nothing that shows on dev)."""
    ordered = sorted(results.tasks, key=list(TASKS).index)
    single = [t for t in ordered if len(results.tasks[t].seeds) == 1]
    low = [f"{name} {results.tasks[t].main[name]:.1f} <= {results.tasks[t].majority[name]:.1f}"
           for t in ordered for name in results.tasks[t].main
           if results.tasks[t].at_or_below_majority(name)]
    lines = []
    if single:
        lines.append(f"One fine-tuning seed (no spread): {', '.join(single)}.")
    if low:
        lines.append(f"†: at or below the majority-class baseline (always the most frequent "
                     f"training label; STS-B: the training mean): {'; '.join(low)}.")
    return [""] + lines if lines else []


def write_markdown(workdir: str, results: FineTuningResults, label: str) -> str:
    """WORKDIR/results.md; returns its table ("" before any task finished)."""
    table = markdown_table(results, label) if results.tasks else ""
    write_text_atomic(
        os.path.join(workdir, RESULTS_MARKDOWN),
        f"GLUE dev, mean ± std over seeds at the best learning rate; init {results.init}"
        f"\n\n{table}\n")
    return table
