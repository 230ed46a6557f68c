"""The top-k completions of every [MASK] in a text, from a run's own model (no export).

  python scripts/fill_mask.py --workdir /tmp/bert_mini "the cat sat on the [MASK] ."
  python scripts/fill_mask.py --workdir runs/th_mini --top_k 10 --step 2000 "a [MASK] b"

--workdir is a pretraining run (its best checkpoint by eval loss unless --step N or
latest) or a Hugging Face BERT directory (an export of scripts/export_hf.py, or a
download). transformers' pipeline("fill-mask") on the run's export gives the same tokens
and probabilities.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from training import cli  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only (see
    tests/test_scripts_import.py)."""
    flags.DEFINE_string("workdir", None, "a pretraining run or a Hugging Face directory")
    flags.DEFINE_integer("top_k", 5, "completions shown per [MASK]")
    flags.DEFINE_string("step", "best", "a step, best or latest")
    flags.mark_flags_as_required(["workdir"])


def main(argv: list[str]) -> None:
    texts = argv[1:]
    if not texts:
        cli.fail('give a text with [MASK], e.g. "the cat sat on the [MASK] ."', cli.EXIT_USAGE)
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)
    step = cli.checkpoint_step("step", FLAGS.step)
    if FLAGS.top_k < 1:
        cli.fail(f"--top_k={FLAGS.top_k} must be at least 1", cli.EXIT_USAGE)

    def job() -> None:
        from training.export import read_run_model
        from training.fill_mask import fill_mask

        model = read_run_model(FLAGS.workdir, step)
        print(f"model: {model.source}")
        for text in texts:
            print(text)
            for n, answers in enumerate(fill_mask(model, text, FLAGS.top_k), 1):
                print(f"  [MASK] {n}: " + "  ".join(f"{token} {p:.3f}"
                                                    for _, token, p in answers), flush=True)

    cli.run(job)


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=cli.parse_flags)
