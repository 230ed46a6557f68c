"""The command line of eval_glue.py, eval_squad.py and finetune.py: --config (a
fine-tuning config file), --workdir, --print_config; one error line and a non-zero
exit for bad input, exit 75 after a signal saved the run (training/cli.py)."""

from __future__ import annotations

from absl import app, flags, logging
from ml_collections import config_flags

from training import cli


def main(config_help: str) -> None:
    """Defines the flags and runs finetuning.run on the config."""
    flags_ = flags.FLAGS
    config_flags.DEFINE_config_file("config", None, config_help, lock_config=True)
    flags.DEFINE_string("workdir", None, "output directory for runs, results and predictions")
    flags.mark_flags_as_required(["config"])  # --workdir too, unless --print_config
    cli.define_print_config()
    flags.declare_key_flag("print_config")  # listed by --help under the entry point

    def run_config(argv: list[str]) -> None:
        del argv
        cli.maybe_print_config(flags_.config)  # --print_config: the config, then exit 0
        cli.require_workdir(flags_.workdir)
        if flags_["verbosity"].present == 0:
            logging.set_verbosity(logging.WARNING)  # keep the console to our progress lines
        from finetuning import run

        # SIGTERM/SIGINT checkpoint the current fine-tuning run and exit cli.EXIT_STOPPED.
        def job() -> None:
            cli.enable_compile_cache(flags_.config)  # before anything compiles
            run(flags_.config, flags_.workdir)

        cli.run(job)

    app.run(run_config, flags_parser=cli.parse_flags)
