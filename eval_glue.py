"""GLUE fine-tuning of a pretrained checkpoint of any attention variant.

  python eval_glue.py --config configs/glue.py:task=rte --workdir DIR \
      --config.init_from=PRETRAIN_WORKDIR --config.glue_dir=../shared/data/glue
  python eval_glue.py --config configs/glue.py:task=all --workdir DIR --config.init_from=RUN

Writes DIR/results.json, DIR/results.md (mean ± std over seeds at the best
learning rate), one folder per (task, lr, seed) with TensorBoard logs, and
DIR/submission/ with test predictions in GLUE's format. Rerunning skips
finished (task, lr, seed) runs.
"""

from __future__ import annotations

from absl import app, flags, logging
from ml_collections import config_flags

from training import cli

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "configs/glue.py[:ARGS]", lock_config=True)
flags.DEFINE_string("workdir", None, "output directory for runs, results and submissions")
flags.mark_flags_as_required(["config"])  # --workdir too, unless --print_config
cli.define_print_config()
flags.declare_key_flag("print_config")  # listed by --help under this file


def main(argv: list[str]) -> None:
    del argv
    cli.maybe_print_config(FLAGS.config)  # --print_config: the config, then exit 0
    cli.require_workdir(FLAGS.workdir)
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)  # keep the console to our progress lines
    from training.finetune import run

    # SIGTERM/SIGINT checkpoint the current fine-tuning run and exit cli.EXIT_STOPPED.
    def job() -> None:
        cli.enable_compile_cache(FLAGS.config)  # before anything compiles
        run(FLAGS.config, FLAGS.workdir)

    cli.run(job)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
