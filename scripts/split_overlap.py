"""How much of a run's held-out text also occurs in its training split (n-gram overlap).

  python scripts/split_overlap.py --workdir runs/native_heads/pretrain_h48
  python scripts/split_overlap.py --workdir RUN --n 8 --n 13 --json out.json

Prints, per n, the share of the evaluated sequences' n-grams found in the training
split and the share of those sequences more than half / 90% made of them: whether a
falling eval loss could be memorised text. What and how: analysis/split_overlap.py.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from analysis.split_overlap import run_overlap
from common.files import write_json_atomic

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when run as a script only (tests import this module; absl's global flags of
    two scripts would collide in one process)."""
    flags.DEFINE_string("workdir", None, "a pretraining workdir (its data cache is read)")
    flags.DEFINE_multi_integer("n", [13], "n-gram length in tokens (repeatable)")
    flags.DEFINE_string("json", None, "also write the numbers here")


def main(argv: list[str]) -> None:
    del argv
    if not FLAGS.workdir:
        sys.exit("error: give --workdir PRETRAIN_WORKDIR")
    if any(n < 1 for n in FLAGS.n):
        sys.exit(f"error: --n {min(FLAGS.n)}: an n-gram has at least one token")
    try:
        report = run_overlap(FLAGS.workdir, FLAGS.n)
    except (ValueError, OSError) as e:
        sys.exit(f"error: {e}")
    for row in report["by_n"]:
        print(f"{FLAGS.workdir}: {100 * row['seen_in_train']:.2f}% of {row['eval_ngrams']} "
              f"eval {row['n']}-grams occur in the training split "
              f"({report['train_sequences']} sequences); "
              f"{100 * row['sequences_over_half_seen']:.2f}% of {row['sequences']} eval "
              f"sequences are over half such n-grams, "
              f"{100 * row['sequences_over_90pct_seen']:.2f}% over 90%")
    if FLAGS.json:
        write_json_atomic(os.path.abspath(FLAGS.json), {FLAGS.workdir: report})


if __name__ == "__main__":
    define_flags()
    app.run(main)
