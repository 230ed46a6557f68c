"""Plots of a sweep's table (PNG): scores vs number of heads, vs key size and vs the fine-tuning
learning rate (error bars: std; each drawn when some line has two points), and MLM
loss curves per row from the TensorBoard events (mean over seeds).

"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from analysis.runs import Metric, RowResult, Table, from_scratch, scalar_curve
from attention import registry
from configs import grids


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
    from finetuning import registry  # the task of a column: GLUE's, SQuAD or a plug-in

    name = metric.key.split("-m")[0]
    if not registry.is_task(name):  # SQuAD's EM column, a plug-in's per-split column
        return "dev score (x100)", True
    task = registry.get(name)
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
    # At most one legend column per panel column (4 inches): three of the classifier
    # grid's long labels side by side were twice as wide as its one-panel figure.
    legend_columns = min(3, len(labels), columns)
    legend_rows = -(-len(labels) // legend_columns)
    fig.legend(handles, labels, loc="lower center", ncol=legend_columns, fontsize=8,
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
