"""The GLUE classifier train step against Hugging Face's PyTorch BERT, at the same shapes.

  python scripts/benchmark_classifier_torch.py --size mini --lengths 128,48,16 --rounds 4

Ours: the jitted train step eval_glue.py runs (training/steps.py: BertForSequenceClassification,
AdamW, clipping), on one device. Theirs: transformers' BertForSequenceClassification in
PyTorch eager mode (the Trainer's default), AdamW, clipping, same widths, batch and
lengths, fp32, dropout on in both. Rounds interleave the two so a loaded machine slows
both alike; the ratio is the median of the per-round ratios (theirs / ours: above 1
means ours is faster). Length buckets make the short lengths the common case for
SST-2 (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAGS = flags.FLAGS
# `with mesh:` as finetuning/runs.py uses it; JAX's deprecation note is shown only for
# code in __main__, and is not a result.
warnings.filterwarnings("ignore", message=".*context manager has been deprecated",
                        category=DeprecationWarning)


def define_flags() -> None:
    """The command line's flags, defined when run as a script only (see
    tests/test_scripts_import.py)."""
    flags.DEFINE_string("size", "mini", "configs/model.py size")
    flags.DEFINE_integer("batch", 32, "batch size")
    flags.DEFINE_list("lengths", ["128", "48", "16"], "sequence lengths")
    flags.DEFINE_integer("steps", 5, "timed steps per round and side")
    flags.DEFINE_integer("rounds", 4, "interleaved rounds")


def ours(config, batch: int, length: int):
    """A function running one of our train steps (compiled before it is returned)."""
    import jax
    import jax.numpy as jnp
    import ml_collections
    import numpy as np

    from models import BertForSequenceClassification
    from training import sharding, steps
    from training.optimizer import make_optimizer

    model = BertForSequenceClassification(config, 2)
    optimizer, schedule = make_optimizer(ml_collections.ConfigDict(dict(
        name="adamw", learning_rate=2e-5, schedule="constant", warmup_steps=0, b1=0.9,
        b2=0.999, eps=1e-6, weight_decay=0.01, grad_clip_norm=1.0)), 1000)

    def init_state(rng):
        ids = jnp.zeros((1, length), jnp.int32)
        params = model.init(rng, ids, ids, ids)["params"]
        return {"step": jnp.zeros((), jnp.int32), "params": params,
                "opt_state": optimizer.init(params)}

    mesh = sharding.make_mesh({"data": 1}, jax.devices()[:1])
    rules = sharding.rules_from_config(())
    sharded = sharding.ShardedState(init_state, mesh, rules, jax.random.key(0))
    step = sharded.jit_step(steps.make_train_step(
        model, optimizer, schedule, 1, prepare_params=sharded.gather,
        objective=steps.ClassifierObjective(False)))
    rng = np.random.default_rng(0)
    data = {"input_ids": rng.integers(5, config.vocab_size, (batch, length)).astype(np.int32),
            "token_type_ids": np.zeros((batch, length), np.int32),
            "attention_mask": np.ones((batch, length), np.int32),
            "labels": rng.integers(0, 2, batch).astype(np.int32),
            "weights": np.ones(batch, np.float32)}
    with mesh:
        state = sharded.init(jax.random.key(0))
        batch_arrays = sharding.host_batch_to_global(data, mesh, rules)
    holder = {"state": state}

    def run() -> None:
        with mesh:
            holder["state"], metrics = step(holder["state"], batch_arrays)
        jax.block_until_ready(metrics["loss_sum"])

    run()  # compile
    return run


def theirs(config, batch: int, length: int):
    import torch
    import transformers

    hf = transformers.BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads,
        intermediate_size=config.mlp_dim, max_position_embeddings=config.max_position_embeddings,
        num_labels=2, attn_implementation="eager")
    model = transformers.BertForSequenceClassification(hf).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, eps=1e-6, weight_decay=0.01)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config.vocab_size, (batch, length), generator=generator)
    labels = torch.randint(0, 2, (batch,), generator=generator)

    def run() -> None:
        optimizer.zero_grad()
        loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    run()
    return run


def timed(run, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        run()
    return (time.perf_counter() - start) / steps


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"unexpected arguments: {argv[1:]}")
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)  # JAX's backend notes, not rows of the table
    from configs import model as model_configs
    from models import ModelConfig

    model_config = model_configs.model_defaults()
    model_configs.apply_size(model_config, FLAGS.size)
    config = ModelConfig.from_config(model_config)
    print(f"| length | ours s/step | PyTorch eager s/step | PyTorch / ours (median of "
          f"{FLAGS.rounds} rounds) |\n|---:|---:|---:|---:|")
    for length in map(int, FLAGS.lengths):
        mine, other = ours(config, FLAGS.batch, length), theirs(config, FLAGS.batch, length)
        pairs = []
        for r in range(FLAGS.rounds):
            first, second = (mine, other) if r % 2 == 0 else (other, mine)
            a, b = timed(first, FLAGS.steps), timed(second, FLAGS.steps)
            pairs.append((a, b) if r % 2 == 0 else (b, a))
        ratio = statistics.median(t / o for o, t in pairs)
        print(f"| {length} | {statistics.median(o for o, _ in pairs):.3f} | "
              f"{statistics.median(t for _, t in pairs):.3f} | {ratio:.2f}x |", flush=True)


if __name__ == "__main__":
    define_flags()
    app.run(main)
