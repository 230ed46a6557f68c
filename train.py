"""MLM pretraining of BERT with any attention variant.

  python train.py --config configs/pretrain.py --workdir /tmp/bert_mini
  python train.py --config configs/pretrain.py:size=mini,attention=talking_heads \
      --config.data.corpus=../shared/data/corpus --config.num_train_steps=2000 --workdir DIR

Rerunning the same command in the same --workdir resumes from its last
checkpoint; SIGTERM/SIGINT save the current step first and exit with code 75
(training/cli.py: EXIT_STOPPED), so `train.py ... && eval_glue.py ...` stops there.
Multi-process: every process runs this same command with the environment described
in maybe_initialize_distributed().
"""

from __future__ import annotations

import os

from absl import app, flags, logging
from ml_collections import config_flags

from training import cli

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "configs/pretrain.py[:ARGS]", lock_config=True)
flags.DEFINE_string("workdir", None, "run directory: checkpoints, TensorBoard events, tokenizer")
flags.mark_flags_as_required(["config"])  # --workdir too, unless --print_config
cli.define_print_config()
flags.declare_key_flag("print_config")  # listed by --help under this file


def maybe_initialize_distributed() -> None:
    """Joins a multi-process run when the environment describes one.

    JAX_COORDINATOR_ADDRESS (host:port), JAX_NUM_PROCESSES and JAX_PROCESS_ID
    start a run by hand (e.g. several processes on one machine); on a TPU pod,
    under SLURM or Open MPI set JAX_DISTRIBUTED=auto and JAX finds its peers.
    """
    import jax

    if os.environ.get("JAX_COORDINATOR_ADDRESS"):
        jax.distributed.initialize(
            coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
            process_id=int(os.environ["JAX_PROCESS_ID"]),
        )
    elif os.environ.get("JAX_DISTRIBUTED") == "auto":
        jax.distributed.initialize()


def main(argv: list[str]) -> None:
    del argv
    cli.maybe_print_config(FLAGS.config)  # --print_config: the config, then exit 0
    cli.require_workdir(FLAGS.workdir)
    if FLAGS["verbosity"].present == 0:
        # Orbax and JAX log every step at INFO; keep the console to our progress lines.
        logging.set_verbosity(logging.WARNING)
    maybe_initialize_distributed()
    from training.pretrain import train_and_evaluate  # after distributed init

    # Bad input or a run that cannot go on: one `error:` line naming the cause, exit 1;
    # stopped by a signal after saving: exit cli.EXIT_STOPPED.
    def job() -> None:
        cli.enable_compile_cache(FLAGS.config)  # before anything compiles
        train_and_evaluate(FLAGS.config, FLAGS.workdir)

    cli.run(job)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
