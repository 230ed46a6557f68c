"""Paired table of fine-tuning workdirs that share a protocol (analysis/finetune_compare.py):
each row's best learning rate, its mean ± std over fine-tuning seeds, and paired tests
by fine-tuning seed with Holm's correction over the table.

  python scripts/compare_finetuning.py --row mh=runs/minilm/mh \
      --row th_identity=runs/minilm/th_identity --pairs mh:th_identity --out DIR
  ... --trend mh_h8:th_h8@8 --trend mh_h96:th_h96@96 --trend_label "th - mh"
      # does th - mh change with the head count? (slope per doubling, one test per task)
  ... --metric accuracy     # every task by dev accuracy (MRPC's main metric is F1)
  ... --change mh_h8:mh_h96@docs/results/head_counts_pretrained/table.json
      # has mh_h96 - mh_h8 moved since that study? (Welch's t on the per-seed
      # differences, one test per task both ran, Holm over the change tests)
  ... --change mh_h8_seed1:mh_h96_seed1@docs/results/head_counts_pretrained/table.json=mh_h8:mh_h96
      # the same against landed rows named otherwise

Writes DIR/table.md and DIR/table.json (each complete or not at all). A row may be read
from such a table.json instead of its workdir (--row NAME=DIR/table.json: its row NAME),
so a row fine-tuned on a machine whose workdirs are gone pairs with one fine-tuned here;
one --row alone lands that row's scores as a table for such a later comparison:
  python scripts/compare_finetuning.py --row mh_h48=runs/native_heads/h48/mh \
      --out docs/results/native_heads/rows/sst2_mh_h48
  python scripts/compare_finetuning.py \
      --row mh_h48=docs/results/native_heads/rows/sst2_mh_h48/table.json \
      --row nat_th_identity_h48=runs/native_heads/h48/nat_th_identity --out DIR
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

from analysis import finetune_compare, stats
from common.files import write_text_atomic

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when run as a script only (tests import this module)."""
    flags.DEFINE_multi_string("row", [], "NAME=WORKDIR: an eval_glue.py / eval_squad.py workdir")
    flags.DEFINE_multi_string("pairs", [], "A:B (B - A is tested); default: the first row "
                              "against each other row")
    flags.DEFINE_multi_string("trend", [], "A:B@X: regress the pairs' differences B - A on "
                              "log2(X) (e.g. per head count; one test per task)")
    flags.DEFINE_string("trend_label", "B - A", "the trend's difference in words")
    flags.DEFINE_multi_string("change", [], "A:B@TABLE.json[=A0:B0]: is B - A here "
                              "different from B - A (B0 - A0) in a landed table (another "
                              "study)? Welch's t on the per-seed differences, one test per "
                              "task")
    flags.DEFINE_string("metric", "", "a dev metric to score every task by (e.g. accuracy "
                        "beside MRPC's F1); default: each task's main metric")
    flags.DEFINE_string("out", None, "directory for table.md and table.json")
    flags.DEFINE_float("alpha", 0.05, "significance level (after Holm)")
    flags.mark_flag_as_required("out")


def main(argv: list[str]) -> None:
    del argv
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)
    try:
        if not FLAGS.row:
            raise ValueError("--row: give NAME=WORKDIR rows: two or more to compare, one to "
                             "land its scores (a table of one row, no test)")
        rows = finetune_compare.parse_rows(FLAGS.row, FLAGS.metric)
        names = [r.name for r in rows]
        pairs = (stats.parse_pairs(FLAGS.pairs, set(names)) if FLAGS.pairs
                 else [(names[0], name) for name in names[1:]])
        tests = finetune_compare.run_tests(rows, pairs)
        trends = (finetune_compare.trend_tests(
            rows, finetune_compare.parse_trend(FLAGS.trend, set(names)), FLAGS.trend_label)
            if FLAGS.trend else [])
        changes = (finetune_compare.change_tests(
            rows, finetune_compare.parse_change(FLAGS.change, set(names)))
            if FLAGS.change else [])
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    os.makedirs(FLAGS.out, exist_ok=True)
    markdown = finetune_compare.render(rows, tests, FLAGS.alpha, trends, changes)
    landed = finetune_compare.to_json(rows, tests, FLAGS.alpha, trends, changes)
    for name, text in (("table.md", markdown), ("table.json", landed)):
        write_text_atomic(os.path.join(FLAGS.out, name), text)
        print(f"wrote {os.path.join(FLAGS.out, name)}")
    print(markdown)


if __name__ == "__main__":
    define_flags()
    app.run(main)
