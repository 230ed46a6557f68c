"""A verdict about an architecture from one fine-tuning table per pretraining seed
(analysis/across_seeds.py): each comparison's per-seed verdicts side by side, and the
declared rule over them (every pretraining seed settles the same way, or no architecture
verdict).

  python scripts/across_seeds.py \
      --table 0=docs/results/head_counts_pretrained_prebest/table.json \
      --table 1=docs/results/head_counts_pretrained_prebest_seed1/table.json \
      --out docs/results/native_heads/across_seeds_sst2

Writes OUT/across_seeds.md and OUT/across_seeds.json (each complete or not at all).
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from analysis import across_seeds
from common.files import write_json_atomic, write_text_atomic

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when run as a script only (tests import this module)."""
    flags.DEFINE_multi_string("table", [], "SEED=PATH: the table.json of "
                              "scripts/compare_finetuning.py for pretraining seed SEED")
    flags.DEFINE_string("out", None, "directory for across_seeds.md and across_seeds.json")
    flags.mark_flag_as_required("out")


def main(argv: list[str]) -> None:
    del argv
    try:
        tables = across_seeds.parse_tables(FLAGS.table)
        if not tables:
            raise ValueError("--table: give SEED=PATH, one per pretraining seed")
        found = across_seeds.comparisons(tables)
        if not found:
            raise ValueError("--table: the tables hold no test (rows landed alone?)")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    seeds = sorted(tables)
    markdown = across_seeds.render(found, seeds)
    write_json_atomic(os.path.join(FLAGS.out, "across_seeds.json"),
                      across_seeds.to_json(found, seeds, tables))
    write_text_atomic(os.path.join(FLAGS.out, "across_seeds.md"), markdown)
    print(markdown)


if __name__ == "__main__":
    define_flags()
    app.run(main)
