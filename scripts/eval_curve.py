"""A pretraining run's logged curve, read back from its TensorBoard events, as numbers.

  python scripts/eval_curve.py --workdir runs/x/seed0/pretrain --tag eval_accuracy \
      --from_step 2400 --json out.json

Prints, per workdir, the tag's value at each logged step in [from_step, to_step] and its
change from the first of those steps to the last: e.g. whether a run was still improving
when its learning rate reached 0. A resumed run's later value for a step wins (as in
the tables' curves). A workdir without that tag is an error naming both.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from analysis.runs import scalar_curve
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


def window(workdir: str, tag: str, from_step: int, to_step: int | None) -> dict:
    """{"values": {step: value}, "change": last - first} of tag within the steps."""
    if not os.path.isdir(workdir):
        raise ValueError(f"{workdir}: no such workdir")
    curve = scalar_curve(workdir, tag)
    if not curve:
        raise ValueError(f"{workdir}: no TensorBoard scalar {tag!r} in its events")
    kept = {step: value for step, value in sorted(curve.items())
            if step >= from_step and (to_step is None or step <= to_step)}
    if not kept:
        raise ValueError(f"{workdir}: {tag!r} has no logged step in [{from_step}, "
                         f"{to_step if to_step is not None else 'end'}]")
    steps = list(kept)
    return {"values": {str(s): kept[s] for s in steps},
            "change": kept[steps[-1]] - kept[steps[0]],
            "from": steps[0], "to": steps[-1]}


def main(argv: list[str]) -> None:
    del argv
    if not FLAGS.workdir:
        sys.exit("error: give --workdir PRETRAIN_WORKDIR (repeatable)")
    report = {"tag": FLAGS.tag, "runs": {}}
    for workdir in FLAGS.workdir:
        try:
            report["runs"][workdir] = numbers = window(
                workdir, FLAGS.tag, FLAGS.from_step, FLAGS.to_step)
        except ValueError as e:
            sys.exit(f"error: {e}")
        print(f"{workdir}: {FLAGS.tag} {numbers['change']:+.4f} from step {numbers['from']} "
              f"to {numbers['to']} ({len(numbers['values'])} logged steps)")
    if FLAGS.json:
        write_json_atomic(FLAGS.json, report)
        print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
