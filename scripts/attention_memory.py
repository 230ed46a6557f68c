"""Peak training memory of attention variants by sequence length: talking heads' full vs
chunked paths (default), or any model args against the first (--variant, repeated).

  python scripts/attention_memory.py --size base --seq_lens 2048,2560,8192 --impls full,chunked
  python scripts/attention_memory.py --size base --seq_lens 128,2048 --variant "" \
      --variant attention=talking_heads --variant attention=talking_heads,th_dynamic=x2l

For each (impl, length) it compiles the gradient of the MLM loss for one
sequence (nothing runs, so lengths far beyond this machine's memory are fine)
and reads XLA's own accounting of the compiled program: temporary buffers,
plus arguments (params) and outputs (gradients). Optimizer state is not part
of this program; it adds 2x the parameters for Adam. The ratio between impls
comes from the same compiler, in the same run.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from absl import app, flags

from configs import model as model_configs
from models import BertForMaskedLM, ModelConfig

FLAGS = flags.FLAGS

GIB = 2**30


def compiled_bytes(cfg: ModelConfig, seq_len: int, predictions: int) -> dict[str, float]:
    model = BertForMaskedLM(cfg)
    ids = jnp.zeros((1, seq_len), jnp.int32)
    positions = jnp.zeros((1, predictions), jnp.int32)
    params = jax.eval_shape(
        lambda: nn.unbox(model.init(jax.random.key(0), ids, ids, ids, positions))["params"])

    def loss(p, ids):
        return jnp.sum(model.apply({"params": p}, ids, ids, ids, positions)["mlm_logits"])

    analysis = jax.jit(jax.grad(loss)).lower(params, ids).compile().memory_analysis()
    temp = analysis.temp_size_in_bytes
    total = temp + analysis.argument_size_in_bytes + analysis.output_size_in_bytes
    return {"temp_gib": temp / GIB, "total_gib": total / GIB}


def variants() -> list[tuple[str, str]]:
    """(label, model args) per row: --variant as given, else talking heads per --impls."""
    if FLAGS.variant:
        return [(args or "multi_head", args) for args in FLAGS.variant]
    return [(impl, f"attention=talking_heads,th_impl={impl},th_chunk={FLAGS.chunk}")
            for impl in FLAGS.impls.split(",")]


def main(argv: list[str]) -> None:
    del argv
    print("| variant | seq len | temporaries GiB | params + grads + temporaries GiB | "
          "vs first |")
    print("|---|---:|---:|---:|---:|")
    for seq_len in (int(s) for s in FLAGS.seq_lens.split(",")):
        first = None
        for label, args in variants():
            arg = ",".join(a for a in (f"size={FLAGS.size}", args,
                                       f"max_len={seq_len},dropout=0,attention_dropout=0") if a)
            cfg = ModelConfig.from_config(model_configs.get_config(arg).model)
            got = compiled_bytes(cfg, seq_len, FLAGS.predictions)
            first = first or got["total_gib"]
            print(f"| {label} | {seq_len} | {got['temp_gib']:.2f} | {got['total_gib']:.2f} | "
                  f"{got['total_gib'] / first:.2f} |", flush=True)


if __name__ == "__main__":
    # Flags are defined here, not at import: scripts/accelerator_check.py imports
    # compiled_bytes beside scripts/benchmark.py's flags.
    flags.DEFINE_string("size", "base", "model size (configs/model.py SIZES)")
    flags.DEFINE_string("seq_lens", "512,2048", "comma list of sequence lengths")
    flags.DEFINE_string("impls", "full,chunked", "talking_heads.impl values to compare")
    flags.DEFINE_multi_string("variant", [], "model args (configs/model.py) of one row, "
                              "e.g. attention=talking_heads,th_groups=4; '' is multi-head; "
                              "repeat the flag; replaces --impls")
    flags.DEFINE_integer("chunk", 128, "query chunk size for impl=chunked")
    flags.DEFINE_integer("predictions", 20, "MLM positions scored per sequence")
    app.run(main)
