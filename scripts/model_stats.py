"""Parameters and FLOPs per token for the papers' rows (or any model config).

  python scripts/model_stats.py                       # every row of every grid
  python scripts/model_stats.py --grid lowrank_table2a --seq_len 512
  python scripts/model_stats.py --config configs/model.py:size=base,attention=talking_heads

Parameters come from the real model's shapes (jax.eval_shape, nothing is
allocated); FLOPs from models/flops.py. The paper's own count, where it gives
one, is printed beside ours.
"""

from __future__ import annotations

import sys

import numpy as np
from absl import app, flags, logging

from attention import registry
from configs import grids
from configs import model as model_configs
from models import ModelConfig
from models.flops import flop_count, parameter_counts

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    flags.DEFINE_string("grid", None, f"one of {sorted(grids.GRIDS)}; default: all grids")
    flags.DEFINE_string("config", None, "configs/model.py:ARGS style model args (overrides --grid)")
    flags.DEFINE_integer("seq_len", 128, "sequence length for the attention FLOPs")


def row_line(name: str, cfg: ModelConfig, seq_len: int, reported: dict) -> str:
    encoder, head = parameter_counts(cfg)
    flops = flop_count(cfg, seq_len)
    paper = f"{reported['params_m']:.0f}M" if "params_m" in reported else "-"
    return (f"| {name} | {cfg.num_layers} | {cfg.hidden_size} | {cfg.num_heads} | "
            f"{cfg.head_key_size} | {cfg.head_value_size} | "
            f"{registry.get(cfg.attention).label(cfg)} | "
            f"{encoder / 1e6:.1f}M | {paper} | {head / 1e6:.2f}M | "
            f"{significant(flops.encoder_per_token / 1e9)} |")


def significant(value: float, digits: int = 3) -> str:
    """`digits` significant figures, without an exponent: a small row's 7.1e-6 GFLOPs is
    0.0000071, not 0.000."""
    return np.format_float_positional(value, precision=digits, unique=False,
                                      fractional=False, trim="-")


def main(argv: list[str]) -> None:
    del argv
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)  # JAX's backend notes, not rows of the table
    header = (f"| row | L | D | heads | key | value | attention | params (no MLM head) | paper | "
              f"MLM head | GFLOPs/token fwd (n={FLAGS.seq_len}) |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|")
    print(header)
    if FLAGS.config:
        arg = FLAGS.config.split(":", 1)[1] if ":" in FLAGS.config else FLAGS.config
        cfg = ModelConfig.from_config(model_configs.get_config(arg).model)
        print(row_line(arg, cfg, FLAGS.seq_len, {}))
        return
    names = [FLAGS.grid] if FLAGS.grid else sorted(grids.GRIDS)
    for grid in names:
        if grid not in grids.GRIDS:
            sys.exit(f"--grid={grid!r} is unknown; choose one of {sorted(grids.GRIDS)}")
        for row in grids.GRIDS[grid]:
            cfg = ModelConfig.from_config(model_configs.get_config(f"row={row.name}").model)
            print(row_line(row.name, cfg, FLAGS.seq_len, row.reported))


if __name__ == "__main__":
    define_flags()
    app.run(main)
