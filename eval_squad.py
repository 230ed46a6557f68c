"""SQuAD v1.1 fine-tuning of a pretrained checkpoint of any attention variant.

  python eval_squad.py --config configs/squad.py --workdir DIR \
      --config.init_from=PRETRAIN_WORKDIR --config.squad_dir=DIR_WITH_THE_JSON_FILES
  python eval_squad.py --config configs/squad.py:seeds=5 --workdir DIR --config.init_from_hf=NAME

Writes DIR/results.json and DIR/results.md (EM and F1, mean ± std over seeds at the
best learning rate), DIR/predictions.json (the best run's answers, official format) and
one folder per (lr, seed) with its predictions and TensorBoard logs. Rerunning skips
finished runs; SIGTERM/SIGINT saves the current run, and the rerun continues it.
"""

from __future__ import annotations

from absl import app, flags, logging
from ml_collections import config_flags

from training import cli

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "configs/squad.py[:ARGS]", lock_config=True)
flags.DEFINE_string("workdir", None, "output directory for runs, results and predictions")
flags.mark_flags_as_required(["config"])  # --workdir too, unless --print_config
cli.define_print_config()
flags.declare_key_flag("print_config")  # listed by --help under this file


def main(argv: list[str]) -> None:
    del argv
    cli.maybe_print_config(FLAGS.config)  # --print_config: the config, then exit 0
    cli.require_workdir(FLAGS.workdir)
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)  # keep the console to our progress lines
    from training.squad_finetune import run

    def job() -> None:
        cli.enable_compile_cache(FLAGS.config)  # before anything compiles
        run(FLAGS.config, FLAGS.workdir)

    cli.run(job)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
