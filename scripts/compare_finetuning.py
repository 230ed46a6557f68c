"""Paired table of fine-tuning workdirs that share a protocol (analysis/finetune_compare.py):
each row's best learning rate, its mean ± std over fine-tuning seeds, and paired tests
by fine-tuning seed with Holm's correction over the table.

  python scripts/compare_finetuning.py --row mh=runs/minilm/mh \
      --row th_identity=runs/minilm/th_identity --pairs mh:th_identity --out DIR

Writes DIR/table.md and DIR/table.json (each complete or not at all).
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

from analysis import finetune_compare
from common.files import write_text_atomic

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when run as a script only (tests import this module)."""
    flags.DEFINE_multi_string("row", [], "NAME=WORKDIR: an eval_glue.py / eval_squad.py workdir")
    flags.DEFINE_multi_string("pairs", [], "A:B (B - A is tested); default: the first row "
                              "against each other row")
    flags.DEFINE_string("out", None, "directory for table.md and table.json")
    flags.DEFINE_float("alpha", 0.05, "significance level (after Holm)")
    flags.mark_flag_as_required("out")


def pairs_of(specs: list[str], names: list[str]) -> list[tuple[str, str]]:
    if not specs:
        return [(names[0], name) for name in names[1:]]
    pairs = []
    for spec in specs:
        a, sep, b = spec.partition(":")
        if not sep or a not in names or b not in names or a == b:
            raise ValueError(f"--pairs {spec!r}: use A:B with two rows among {names}")
        pairs.append((a, b))
    return pairs


def main(argv: list[str]) -> None:
    del argv
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)
    try:
        if len(FLAGS.row) < 2:
            raise ValueError("--row: give two or more NAME=WORKDIR rows to compare")
        rows = finetune_compare.parse_rows(FLAGS.row)
        pairs = pairs_of(FLAGS.pairs, [r.name for r in rows])
        tests = finetune_compare.run_tests(rows, pairs)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    os.makedirs(FLAGS.out, exist_ok=True)
    markdown = finetune_compare.render(rows, tests, FLAGS.alpha)
    for name, text in (("table.md", markdown),
                       ("table.json", finetune_compare.to_json(rows, tests, FLAGS.alpha))):
        write_text_atomic(os.path.join(FLAGS.out, name), text)
        print(f"wrote {os.path.join(FLAGS.out, name)}")
    print(markdown)


if __name__ == "__main__":
    define_flags()
    app.run(main)
