"""Each row's best pretraining rate in a study's rate grid, and whether the grid brackets it.

  python scripts/rate_bracket.py --study runs/native_heads
  python scripts/rate_bracket.py --study runs/native_heads \
      --json docs/results/native_heads/rate_bracket.json \
      --md docs/results/native_heads/rate_bracket.md
  python scripts/rate_bracket.py --study runs/native_heads --steps 4000 \
      --best mh_h48 --best nat_th_identity_h48
      # prints "ROW RATE" per row, the rate spelled as its folder spells it (3e-4); an
      # error line per row whose grid does not bracket its best rate, and exit 1
  python scripts/rate_bracket.py --study runs/native_heads --best mh_h48 \
      --landed docs/results/native_heads/rate_bracket.json
      # the same from a clone without the grid's workdirs: the landed runs stand in

Reads every STUDY/pretrain_* workdir (finished, diverged or still running; with --best
only those rows') and prints, per row at one pretraining seed and schedule, the lowest
final eval loss, the runner-up's gap, and whether a lower and a higher rate both ended
worse; at an edge, the next rate to add. What a row is, and how: analysis/rate_bracket.py.
Landing into an existing --json keeps the finished runs it records that the study no
longer has (or has only as a rerun still going), so a landing from a fresh clone loses
nothing; --landed FILE reads another such file the same way (for --best, too).
"""

from __future__ import annotations

import json
import logging
import os
import sys

from absl import app, flags

from analysis.rate_bracket import (
    DEFAULT_TIE_NATS,
    bracketed,
    brackets,
    find_pretrainings,
    landed_pretrainings,
    landed_reruns_differ,
    markdown,
    matching,
    rate_spelling,
    with_landed,
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
    flags.DEFINE_multi_string("best", [], "print this row's bracketed best rate only "
                              "(repeatable; exit 1 unless every one is bracketed)")
    flags.DEFINE_integer("seed", 0, "the pretraining seed --best reads")
    flags.DEFINE_integer("steps", None, "the schedule --best reads (needed when a row has "
                         "several at that seed)")
    flags.DEFINE_multi_string("landed", [], "a results file of this script (--json) whose "
                              "finished runs count where the study has no finished workdir "
                              "for them (repeatable; an existing --json is read so too)")


def _grid_may_be_elsewhere(found, row: str) -> bool:
    """Whether the row's grid at the asked seed lacks finished runs that a landed results
    file could supply: no such row here, or fewer than three finished rates (a grid of
    three that misses its bracket needs new rates, not landed ones)."""
    matches = matching(found, row, FLAGS.seed, FLAGS.steps)
    return not matches or any(sum(run.finished for run in b.runs) < 3 for b in matches)


def print_best(found, rows: list[str]) -> int:
    """ROW RATE per bracketed row on stdout; an error line per other row, and a warning
    per pick within the tie margin, on stderr. The exit status."""
    picks, errors = [], []
    for row in rows:
        try:
            bracket = bracketed(found, row, FLAGS.seed, FLAGS.steps, FLAGS.tie)
        except ValueError as e:
            hint = "" if FLAGS.landed or not _grid_may_be_elsewhere(found, row) else (
                "; runs landed elsewhere (a fresh clone's docs/results/) count with --landed "
                "FILE (head_count_study.sh: LANDED_BRACKET=FILE)")
            errors.append(f"error: {e}{hint}")
            continue
        if bracket.tie:
            print(f"warning: {row}: the runner-up is {bracket.runner_up_gap:.4f} nats "
                  f"behind (under the tie margin {FLAGS.tie:g}): the pick is a near tie",
                  file=sys.stderr)
        picks.append(f"{row} {rate_spelling(bracket.best)}")
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    print("\n".join(picks))
    return 0


def main(argv: list[str]) -> None:
    del argv
    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # event-file chatter
    if not FLAGS.study:
        sys.exit("error: give --study OUT (a directory of pretrain_* workdirs)")
    landing_again = bool(FLAGS.json) and os.path.exists(FLAGS.json) and not FLAGS.best
    landed_files = list(FLAGS.landed) + ([FLAGS.json] if landing_again else [])
    rows = FLAGS.best or None
    if landed_files and not os.path.isdir(FLAGS.study):
        print(f"warning: {FLAGS.study}: no such study directory; landed runs only",
              file=sys.stderr)
    try:
        landed = [run for path in landed_files for run in landed_pretrainings(path, rows)]
        runs, reruns_differ = with_landed(
            find_pretrainings(FLAGS.study, rows, required=not landed), landed)
        found = brackets(runs, FLAGS.tie)
    except ValueError as e:
        sys.exit(f"error: {e}")
    for line in reruns_differ:
        print(f"warning: rerun differs: {line}", file=sys.stderr)
    if landing_again:  # landing again loses nothing, what was found apart included
        earlier = landed_reruns_differ(FLAGS.json)
        reruns_differ = earlier + [line for line in reruns_differ if line not in earlier]
    if FLAGS.best:
        sys.exit(print_best(found, FLAGS.best))
    table = markdown(found, FLAGS.tie, reruns_differ)
    print(table, end="")
    if FLAGS.json:
        write_json_atomic(os.path.abspath(FLAGS.json), json.loads(json.dumps(
            {"study": FLAGS.study, "tie_nats": FLAGS.tie,
             "rows": [bracket.to_json() for bracket in found],
             "reruns_differ": reruns_differ})))
    if FLAGS.md:
        write_text_atomic(os.path.abspath(FLAGS.md), table)


if __name__ == "__main__":
    define_flags()
    app.run(main)
