"""A pretraining run's logged curve, read back from its TensorBoard events, as numbers.

  python scripts/eval_curve.py --workdir runs/x/seed0/pretrain --tag eval_accuracy \
      --from_step 2400 --json out.json

Prints, per workdir, the tag's value at each logged step in [from_step, to_step] and its
change from the first of those steps to the last: e.g. whether a run was still improving
when its learning rate reached 0. A resumed run's later value for a step wins (as in
the tables' curves). A workdir without that tag is an error naming both.

Landing again into an existing --json of the same tag keeps a named workdir's landed
curve where this machine has no such workdir (a fresh clone) or its run has not yet
reached the curve's last step (a rerun still going); a rerun that reaches it replaces it
(analysis/eval_curve.py).
"""

from __future__ import annotations

import sys

from absl import app, flags

from analysis.eval_curve import curves, landed_curves
from common.files import write_json_atomic

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when run as a script only (tests import this module; absl's global flags of
    two scripts would collide in one process)."""
    flags.DEFINE_multi_string("workdir", [], "a pretraining workdir (repeatable)")
    flags.DEFINE_string("tag", "eval_loss", "the TensorBoard scalar, e.g. eval_accuracy")
    flags.DEFINE_integer("from_step", 0, "the first step kept")
    flags.DEFINE_integer("to_step", None, "the last step kept (default: the last logged)")
    flags.DEFINE_string("json", None, "also write the numbers here")


def main(argv: list[str]) -> None:
    del argv
    if not FLAGS.workdir:
        sys.exit("error: give --workdir PRETRAIN_WORKDIR (repeatable)")
    try:
        report, lines = curves(FLAGS.workdir, FLAGS.tag, FLAGS.from_step, FLAGS.to_step,
                               landed_curves(FLAGS.json, FLAGS.tag, FLAGS.from_step,
                                             FLAGS.to_step))
    except ValueError as e:
        sys.exit(f"error: {e}")
    print("\n".join(lines))
    if FLAGS.json:
        write_json_atomic(FLAGS.json, report)
        print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
