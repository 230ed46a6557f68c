"""A sweep's results as tables (markdown, CSV), paired significance tests and plots.

  python scripts/tables.py --out runs/th_cpu
  python scripts/tables.py --out runs/t2a --grid lowrank_table2a --format md,csv \
      --plots runs/t2a/plots

Rows, metrics and seeds: analysis/runs.py; the paired tests and their verdict rule:
analysis/stats.py; the tables: analysis/tables.py; the plots: analysis/plots.py.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

from analysis.plots import write_plots
from analysis.runs import parse_steps_to
from analysis.stats import default_pairs, grid_pairs, parse_pairs
from analysis.tables import collect, render
from common.files import write_text_atomic
from configs import grids

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    flags.DEFINE_string("out", None, "the sweep's root directory (scripts/sweep.py --out)")
    flags.DEFINE_string("grid", None, f"rows of configs/grids.py: {', '.join(sorted(grids.GRIDS))}")
    flags.DEFINE_string("grid_file", None, "rows from a grid file (see analysis/sweep_grids.py)")
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
