"""Test a written significance.csv again under today's rule (analysis/stats.py): the
paired t interval, Holm's correction over the file's tests, better / equivalent / not
settled. For tables whose runs are gone: every row of the file keeps its seeds and
both sides' values.

  python scripts/rejudge_significance.py docs/results/classifier_question/significance.csv

Prints the markdown table; --out FILE also writes it (complete or not at all).
"""

from __future__ import annotations

import sys

from absl import app, flags

from analysis import stats, tables
from common.files import write_text_atomic

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("out", None, "markdown file to write the table to")
    flags.DEFINE_float("alpha", 0.05, "significance level (after Holm)")


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        print("error: give one significance.csv", file=sys.stderr)
        sys.exit(1)
    try:
        tests = stats.tests_from_csv(argv[1])
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    markdown = tables.significance_markdown(tests, "t", FLAGS.alpha) + "\n"
    if FLAGS.out:
        write_text_atomic(FLAGS.out, markdown)
    print(markdown, end="")


if __name__ == "__main__":
    define_flags()
    app.run(main)
