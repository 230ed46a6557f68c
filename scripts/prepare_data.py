"""Builds only the tokenizer and packed data cache of a pretraining config, as train.py
would, without JAX or a model.

  python scripts/prepare_data.py --config configs/pretrain.py:ARGS --workdir DIR \
      [--config.data.cache_dir=/shared/cache] [--config.data.FIELD=VALUE ...]

Takes the same --config as train.py. Run it once (e.g. on one host, with
data.cache_dir on shared storage) before a multi-host run: every process of train.py
then finds the cache complete, verifies it and reads it, and nobody trains the tokenizer
a second time (it would come out the same, at the cost of two more passes over the corpus). With
data.cache_dir unset the cache goes to WORKDIR/data_cache, where train.py looks.
Prints one line naming the tokenizer and cache directories; bad input ends with one
`error:` line and exit code 1 (2 for a bad flag or config value).
"""

from __future__ import annotations

import os
import sys
import time

from absl import app, flags, logging
from ml_collections import config_flags

# Importable as `python scripts/prepare_data.py` from the repository root or elsewhere.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    config_flags.DEFINE_config_file("config", None, "configs/pretrain.py[:ARGS]",
                                    lock_config=True)
    flags.DEFINE_string("workdir", None, "run directory (its data_cache/ when data.cache_dir "
                        "is unset)")


def _error(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def parse_flags(argv: list[str]) -> list[str]:
    """absl's parsing, but a bad flag or config value is one `error:` line (exit 2)."""
    try:
        rest = FLAGS(argv)
    except Exception as e:  # flags.Error, and whatever the config file raises  # noqa: BLE001
        lines = str(e).strip().splitlines()
        _error(f"bad flag or config value: {lines[-1] if lines else type(e).__name__}", 2)
    for name in ("config", "workdir"):
        if FLAGS[name].value is None:
            _error(f"--{name} is required", 2)
    return rest


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        _error(f"unexpected arguments: {' '.join(argv[1:])}", 2)
    import input_pipeline  # after flag parsing: --help stays fast

    data_config = FLAGS.config.data
    t0 = time.time()
    try:
        data = input_pipeline.from_config(data_config, FLAGS.workdir)
    except (ValueError, OSError) as e:  # InputPipelineError is a ValueError
        logging.error("%s: %s", type(e).__name__, e)
        _error(str(e), 1)
    n_train, n_eval = len(data.train), len(data.eval)
    print(f"data: tokenizer {data.tokenizer_dir} (vocabulary {data.vocab_size}); cache "
          f"{data.packed_dir}: {n_train} train / {n_eval} eval sequences of "
          f"{data.max_seq_length} tokens; {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=parse_flags)
