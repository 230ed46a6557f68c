"""Each row's best pretraining rate in a study's rate grid, and whether the grid brackets it.

  python scripts/rate_bracket.py --study runs/native_heads
  python scripts/rate_bracket.py --study runs/native_heads \
      --json docs/results/native_heads/rate_bracket.json \
      --md docs/results/native_heads/rate_bracket.md
  python scripts/rate_bracket.py --study runs/native_heads --best nat_th_identity_h48
      # prints the row's bracketed best rate only, spelled as its folder spells it
      # (3e-4), or an error line and exit 1 while it is not bracketed

Reads every STUDY/pretrain_* workdir (finished or still running) and prints, per row
(workdir name without its _lr/_seed parts, at one pretraining seed and schedule), the
lowest final eval loss, the runner-up's gap, and whether a lower and a higher rate both
ended worse; at an edge, the next rate to add. How: analysis/rate_bracket.py.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from absl import app, flags

from analysis.rate_bracket import (
    DEFAULT_TIE_NATS,
    best_run,
    brackets,
    find_pretrainings,
    markdown,
    rate_spelling,
)
from common.files import write_json_atomic, write_text_atomic

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when run as a script only (tests import this module; absl's global flags of
    two scripts would collide in one process)."""
    flags.DEFINE_string("study", None, "the study's output directory (its pretrain_* dirs)")
    flags.DEFINE_float("tie", DEFAULT_TIE_NATS, "a runner-up closer than this (nats) is a tie")
    flags.DEFINE_string("json", None, "also write the numbers here")
    flags.DEFINE_string("md", None, "also write the table and verdicts here")
    flags.DEFINE_string("best", None, "print only this row's bracketed best rate "
                        "(seed 0 unless --seed; exit 1 when not bracketed)")
    flags.DEFINE_integer("seed", 0, "the pretraining seed --best reads")


def main(argv: list[str]) -> None:
    del argv
    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # event-file chatter
    if not FLAGS.study:
        sys.exit("error: give --study OUT (a directory of pretrain_* workdirs)")
    try:
        found = brackets(find_pretrainings(FLAGS.study), FLAGS.tie)
        if FLAGS.best:
            print(rate_spelling(best_run(found, FLAGS.best, FLAGS.seed, FLAGS.tie)))
            return
    except ValueError as e:
        sys.exit(f"error: {e}")
    table = markdown(found, FLAGS.tie)
    print(table, end="")
    if FLAGS.json:
        write_json_atomic(os.path.abspath(FLAGS.json), json.loads(json.dumps(
            {"study": FLAGS.study, "tie_nats": FLAGS.tie,
             "rows": [bracket.to_json() for bracket in found]})))
    if FLAGS.md:
        write_text_atomic(os.path.abspath(FLAGS.md), table)


if __name__ == "__main__":
    define_flags()
    app.run(main)
