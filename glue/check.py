"""Checks a GLUE folder: reads every split file present and compares row counts.

    python -m glue.check /path/to/glue_data

Prints one line per split (OK, MISMATCH, absent) and exits 1 on a mismatch or
a file that does not parse, so a truncated or mislaid download shows up before
a fine-tuning run rather than as a bad score after it.
"""

from __future__ import annotations

import sys
import time

from glue.readers import read_split, split_path
from glue.tasks import TASKS, GlueDataError


def check(glue_dir: str) -> bool:
    """Returns True when every present file parses and has GLUE's official row count."""
    ok = True
    for task in TASKS.values():
        for split in task.splits:
            if not split_path(task, glue_dir, split).is_file():
                print(f"{task.name:6s} {split:16s} absent")
                continue
            start = time.perf_counter()
            try:
                rows = len(read_split(task, glue_dir, split))
            except GlueDataError as e:
                print(f"{task.name:6s} {split:16s} ERROR {e}")
                ok = False
                continue
            expected = task.official_sizes[split]
            status = "OK" if rows == expected else "MISMATCH"
            ok &= rows == expected
            seconds = time.perf_counter() - start
            print(
                f"{task.name:6s} {split:16s} {rows:7d} rows (official {expected:7d}) "
                f"{status} {seconds:.2f}s"
            )
    return ok


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m glue.check GLUE_DIR", file=sys.stderr)
        return 2
    return 0 if check(argv[1]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
