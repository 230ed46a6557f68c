"""Lines for the person watching a run.

Library INFO logs stay quiet by default (train.py and eval_glue.py run at WARNING), so
what a user must see while waiting (the tokenizer being trained, the cache being built,
the step being compiled) goes through console(): printed by process 0 only, and logged
at INFO for log files."""

from __future__ import annotations

import sys

from absl import logging


def console(message: str) -> None:
    # JAX only when the caller has it: the input pipeline (and its worker processes)
    # import this module without needing JAX, and one process is process 0.
    jax = sys.modules.get("jax")
    if jax is None or jax.process_index() == 0:
        print(message, flush=True)
    logging.info("%s", message)
