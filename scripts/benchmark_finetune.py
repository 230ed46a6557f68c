"""eval_glue.py's speed with and without length buckets, in one paired run.

  python scripts/benchmark_finetune.py --init_from /tmp/bert_mini --glue_dir ../shared/data/glue \
      --tasks sst2,rte --max_train 4000 --rounds 3 --markdown bench_finetune.md

Each round runs eval_glue.py once per setting (`length_buckets=none`: every batch padded
to max_seq_length, the path before buckets; `auto`: length buckets; `grouped`: buckets on
batches grouped by length), in alternating order, each in a fresh workdir, one learning
rate, one seed, --epochs epochs: what a user waits for, start-up and compilation included.
Reported per task and setting: the median wall time over the rounds, training examples
per second (examples x epochs / wall time), the speed-up over the padded path, and the
mean dev score (the task's main metric). none and auto train on the same batches, so
their dev scores agree up to dropout's draws (tests/test_eval_glue.py checks equal
predictions with dropout off); grouped batches other rows together.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common.files import write_text_atomic  # noqa: E402

FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# setting -> configs/glue.py args: the padded path, length buckets, buckets on batches
# grouped by length.
SETTINGS = {"none": "buckets=none", "auto": "buckets=auto",
            "grouped": "buckets=auto,group_by_length=true"}


def define_flags() -> None:
    """The command line's flags, defined when run as a script only (see
    tests/test_scripts_import.py)."""
    flags.DEFINE_string("init_from", None, "a pretraining workdir")
    flags.DEFINE_string("init_from_hf", None, "or a Hugging Face BERT directory")
    flags.DEFINE_string("glue_dir", None, "GLUE TSV folder")
    flags.DEFINE_list("tasks", ["sst2", "rte"], "GLUE tasks")
    flags.DEFINE_integer("max_train", 4000, "training examples per run")
    flags.DEFINE_integer("seq_len", 128, "max_seq_length")
    flags.DEFINE_integer("rounds", 3, "paired rounds")
    flags.DEFINE_integer("epochs", 1, "fine-tuning epochs per run")
    flags.DEFINE_string("json", None, "write the measurements here")
    flags.DEFINE_string("markdown", None, "write the table here")


def train_examples(glue_dir: str, task: str, cap: int) -> int:
    import glue

    spec = glue.get_task(task)
    rows = len(glue.load_split(spec, "train", glue_dir))
    return min(rows, cap)


def one_run(task: str, setting: str) -> tuple[float, float]:
    """Wall seconds and dev score (the task's main metric) of one eval_glue.py run."""
    source = (f"--config.init_from={FLAGS.init_from}" if FLAGS.init_from
              else f"--config.init_from_hf={FLAGS.init_from_hf}")
    with tempfile.TemporaryDirectory(prefix="bench_finetune-") as workdir:
        command = [sys.executable, "eval_glue.py",
                   f"--config=configs/glue.py:task={task},seeds=1,epochs={FLAGS.epochs},lr=5e-5,"
                   f"max_train={FLAGS.max_train},seq_len={FLAGS.seq_len},{SETTINGS[setting]}",
                   source, f"--config.glue_dir={FLAGS.glue_dir}", "--config.save_model=none",
                   f"--workdir={workdir}"]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"error: {' '.join(command)} failed:\n{done.stderr[-2000:]}")
        with open(os.path.join(workdir, "results.json")) as f:
            (result,) = json.load(f)["tasks"].values()
    (score,) = result["main"].values()
    return seconds, score


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"unexpected arguments: {argv[1:]}")
    if not (FLAGS.init_from or FLAGS.init_from_hf) or not FLAGS.glue_dir:
        sys.exit("error: give --init_from (or --init_from_hf) and --glue_dir")
    times: dict[str, dict[str, list[float]]] = {t: {s: [] for s in SETTINGS} for t in FLAGS.tasks}
    scores: dict[str, dict[str, list[float]]] = {t: {s: [] for s in SETTINGS} for t in FLAGS.tasks}
    for r in range(FLAGS.rounds):
        for task in FLAGS.tasks:
            order = list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]
            for setting in order:
                seconds, score = one_run(task, setting)
                times[task][setting].append(seconds)
                scores[task][setting].append(score)
                print(f"round {r + 1} {task} {SETTINGS[setting]}: {seconds:.1f} s, "
                      f"dev {score:.1f}", flush=True)
    rows = []
    for task in FLAGS.tasks:
        n = train_examples(FLAGS.glue_dir, task, FLAGS.max_train)
        median = {s: statistics.median(times[task][s]) for s in SETTINGS}
        n *= FLAGS.epochs  # examples trained on
        rows.append({"task": task, "train_examples": n, "seconds": times[task],
                     "dev_scores": scores[task], "median_s": median,
                     "examples_per_s": {s: n / median[s] for s in SETTINGS},
                     "speedup": {s: median["none"] / median[s] for s in SETTINGS}})
    lines = ["| task | examples x epochs | " + " | ".join(
        f"{s} ({SETTINGS[s]}): s, ex/s, speed-up, dev" for s in SETTINGS) + " |",
        "|---|---:|" + "---:|" * len(SETTINGS)]
    for row in rows:
        lines.append(f"| {row['task']} | {row['train_examples']} | " + " | ".join(
            f"{row['median_s'][s]:.1f}, {row['examples_per_s'][s]:.0f}, "
            f"{row['speedup'][s]:.2f}x, {statistics.mean(row['dev_scores'][s]):.1f}"
            for s in SETTINGS) + " |")
    table = "\n".join(lines)
    print(table)
    if FLAGS.json:
        write_text_atomic(FLAGS.json, json.dumps(rows, indent=2) + "\n")
    if FLAGS.markdown:
        write_text_atomic(FLAGS.markdown, table + "\n")


if __name__ == "__main__":
    define_flags()
    app.run(main)
