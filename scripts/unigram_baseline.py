"""The unigram yardstick of a pretraining run: how far below it the run's MLM loss is.

  python scripts/unigram_baseline.py --workdir runs/text_study/txt_mh_h8/seed0/pretrain
  python scripts/unigram_baseline.py --workdir A --workdir B --json out.json

What it computes, and how: analysis/unigram_baseline.py.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags

from analysis.unigram_baseline import baseline
from common.files import write_json_atomic

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    flags.DEFINE_multi_string("workdir", [], "a finished (or running) pretraining workdir")
    flags.DEFINE_string("json", None, "also write the numbers here")


def main(argv: list[str]) -> None:
    del argv
    if not FLAGS.workdir:
        sys.exit("error: give --workdir PRETRAIN_WORKDIR (repeatable)")
    report = {}
    for workdir in FLAGS.workdir:
        try:
            report[workdir] = numbers = baseline(workdir)
        except (ValueError, OSError) as e:
            sys.exit(f"error: {e}")
        gap = (f"; run eval loss {numbers['eval_loss']:.3f}, {numbers['below_unigram']:.3f} "
               f"nats below" if "eval_loss" in numbers else "")
        print(f"{workdir}: unigram {numbers['unigram_loss']:.3f} nats "
              f"({100 * numbers['unigram_accuracy']:.1f}% top-1) on "
              f"{numbers['scored_tokens']} tokens{gap}")
    if FLAGS.json:
        write_json_atomic(os.path.abspath(FLAGS.json), json.loads(json.dumps(report)))


if __name__ == "__main__":
    define_flags()
    app.run(main)
