"""The low-rank bottleneck made visible: fit attention heads to random targets.

  python scripts/lowrank_probe.py                     # n=16, writes docs/figures/ and the doc
  python scripts/lowrank_probe.py --n 8 --steps 2000 --trials 2 --out /tmp/probe --doc ''

What it computes, and how: analysis/lowrank_probe.py.
"""

from __future__ import annotations

import os
import shlex
import sys
import time

import jax

from analysis.lowrank_probe import run_probe, write_outputs


# -- entry point ----------------------------------------------------------------------------
def define_flags() -> None:
    # Defined only when run as a script: the tests import this module for its math, and
    # global absl flags named n/steps/out would collide with other scripts in one process.
    from absl import flags

    flags.DEFINE_integer("n", 16, "sequence length n (key sizes 1..2n are probed)")
    flags.DEFINE_integer("width", 0, "token width D (>= n); 0 means 2n")
    flags.DEFINE_integer("heads", 4, "heads h for the multi-head vs talking-heads comparison")
    flags.DEFINE_integer("steps", 3000, "Adam steps per fit")
    flags.DEFINE_float("lr", 0.05, "peak Adam learning rate (cosine-decayed to 0)")
    flags.DEFINE_integer("trials", 4, "random targets (each with its own x) per key size")
    flags.DEFINE_integer("restarts", 4, "random initialisations per target")
    flags.DEFINE_integer("seed", 0, "PRNG seed for inputs, targets and inits")
    flags.DEFINE_string("out", "docs/figures", "directory for lowrank_probe.{json,png}")
    flags.DEFINE_string("doc", "docs/LOWRANK_PROBE.md", "markdown summary path; '' to skip")


def main(argv: list[str]) -> None:
    from absl import flags

    if len(argv) > 1:
        sys.exit(f"unexpected arguments: {argv[1:]}")
    f = flags.FLAGS
    for name in ("n", "steps", "trials", "restarts", "heads"):
        if getattr(f, name) < 1:
            sys.exit(f"--{name}={getattr(f, name)} must be >= 1")
    width = f.width or 2 * f.n
    if width < f.n:
        sys.exit(f"--width={width} must be >= --n={f.n}: Theorem 1 needs full row rank x")
    command = "python scripts/lowrank_probe.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    start = time.time()
    results = run_probe(f.n, width, f.heads, f.steps, f.lr, f.trials, f.restarts, f.seed,
                        log=lambda line: print(line, file=sys.stderr, flush=True))
    results["runtime_s"] = time.time() - start
    results["platform"] = f"{jax.devices()[0].platform} ({os.cpu_count()} cores)"
    print(write_outputs(results, f.out, f.doc or None, command.strip()))


if __name__ == "__main__":
    from absl import app

    define_flags()
    app.run(main)
