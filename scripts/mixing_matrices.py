"""What a talking-heads run learnt in its mixing matrices: does each head still mostly
talk to itself, or is it a spread mix of all heads?

  python scripts/mixing_matrices.py --workdir runs/text_study/txt_th_h8/seed0/pretrain
  python scripts/mixing_matrices.py --workdir A --workdir B [--step 1000] [--json out.json]

What it computes, and how: analysis/mixing_matrices.py.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags, logging

from analysis.mixing_matrices import describe
from common.files import write_json_atomic

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    flags.DEFINE_multi_string("workdir", [], "a talking-heads pretraining workdir (repeatable)")
    flags.DEFINE_integer("step", None, "the checkpoint step (default: the newest that restores)")
    flags.DEFINE_string("json", None, "also write the numbers here")


def main(argv: list[str]) -> None:
    del argv
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)  # Orbax's restore notes are not results
    if not FLAGS.workdir:
        sys.exit("error: give --workdir PRETRAIN_WORKDIR (repeatable)")
    report = {}
    for workdir in FLAGS.workdir:
        try:
            report[workdir] = found = describe(workdir, FLAGS.step)
        except (ValueError, OSError) as e:  # CheckpointError is a ValueError
            sys.exit(f"error: {e}")
        print(f"{workdir} (step {found['step']}): share of each output head's squared "
              f"weights (fan-in normal init in brackets)")
        for name, m in found["matrices"].items():
            init = m["fan_in_init"]
            own = f"own head {m['own']:.2f} ({init['own']:.2f}), " if "own" in m else ""
            print(f"  {name} {m['shape'][0]}x{m['shape'][1]}: {own}"
                  f"largest head {m['top']:.2f} ({init['top']:.2f})")
    if FLAGS.json:
        write_json_atomic(os.path.abspath(FLAGS.json), json.loads(json.dumps(report)))


if __name__ == "__main__":
    define_flags()
    app.run(main)
