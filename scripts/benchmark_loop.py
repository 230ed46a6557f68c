"""The training loop's overhead: train.py's steady-state step time against the bare
jitted step on the same shapes, in one run.

  python scripts/benchmark_loop.py --config configs/pretrain.py:size=mini,batch=32,seq_len=128 \
      --steps 60 --rounds 3 --json loop.json

Each round runs, in turn:
  loop  `python train.py` as a user runs it (host batches and masking, metrics,
        logging), in a fresh workdir; its steady-state step time is the median of the
        `step_time_s` it logs to TensorBoard, without the first window (compilation);
  bare  the same compiled train step (training/pretrain.compile_for_mesh) in this
        process, fed one batch that stays on the device, timed over the same number
        of steps after a warm-up.
The ratio loop / bare of each round and their median are printed (1.00 = no
overhead). Eval and checkpoint time are not in train.py's step_time_s by design.
Both share the data cache, built once before the first round.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import ml_collections
from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import input_pipeline  # noqa: E402
from configs import pretrain as pretrain_configs  # noqa: E402
from configs.overrides import apply_overrides  # noqa: E402
from models import BertForMaskedLM  # noqa: E402
from training import pretrain, sharding  # noqa: E402
from training.optimizer import make_optimizer  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    flags.DEFINE_string("config", "configs/pretrain.py:size=mini,batch=32,seq_len=128",
                        "configs/pretrain.py[:ARGS] for both sides")
    flags.DEFINE_multi_string("set", [], "extra FIELD=VALUE overrides for both (repeatable)")
    flags.DEFINE_integer("steps", 60, "steps per side per round")
    flags.DEFINE_integer("log_every", 10, "train.py's log interval (its step_time_s windows)")
    flags.DEFINE_integer("rounds", 3, "loop/bare alternations")
    flags.DEFINE_string("json", None, "write the results here")
    flags.DEFINE_integer("host_batch", 256, "global batch for the host input rate (0: skip it)")


def load_config(spec: str, overrides: list[str]):
    _, _, arg = spec.partition(":")
    config = pretrain_configs.get_config(arg or None)
    apply_overrides(config, overrides)
    return config


def with_cache(config, cache_dir: str):
    data = ml_collections.ConfigDict(config.data.to_dict())
    data.cache_dir = cache_dir
    return data


def loop_step_time(spec: str, overrides: list[str], cache_dir: str, steps: int,
                   log_every: int) -> float:
    """Median logged step_time_s of a real train.py run, compilation window dropped."""
    from tensorboard.backend.event_processing import event_accumulator

    with tempfile.TemporaryDirectory() as workdir:
        command = [sys.executable, os.path.join(REPO, "train.py"), "--config", spec,
                   "--workdir", workdir, f"--config.data.cache_dir={cache_dir}",
                   f"--config.num_train_steps={steps}", f"--config.log_every_steps={log_every}",
                   f"--config.eval_every_steps={steps}",
                   f"--config.checkpoint_every_steps={steps}",
                   *[f"--config.{o}" for o in overrides]]
        subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        events = event_accumulator.EventAccumulator(glob.glob(f"{workdir}/events.*")[0])
        events.Reload()
        times = [e.value for e in events.Scalars("step_time_s")]
    return statistics.median(times[1:])


def bare_step_time(config, cache_dir: str, steps: int) -> float:
    """The same jitted step, one device-resident batch, no loop around it."""
    data = input_pipeline.from_config(with_cache(config, cache_dir), cache_dir)
    mesh = sharding.make_mesh(dict(config.mesh))
    rules = sharding.rules_from_config(config.logical_axis_rules)
    model = BertForMaskedLM(pretrain.model_config_for(config, data.vocab_size))
    optimizer, schedule = make_optimizer(config.optimizer, config.num_train_steps)
    on_device = config.data.masking == "device"
    masker = data.device_masker() if on_device else None
    compiled = pretrain.compile_for_mesh(model, optimizer, schedule, config, mesh, rules,
                                         masker)
    batcher = data.batcher(config.batch_size, seed=config.seed, on_device=on_device)
    batch = sharding.host_batch_to_global(batcher.batch(0), mesh, rules)
    with mesh:
        state = compiled.init_fn(jax.random.key(config.seed))
        for _ in range(3):
            state, metrics = compiled.train_step(state, batch)
        jax.block_until_ready(metrics)
        start = time.perf_counter()
        for _ in range(steps):
            state, metrics = compiled.train_step(state, batch)
        jax.block_until_ready((state, metrics))
    return (time.perf_counter() - start) / steps


def host_rates(config, cache_dir: str, batch_size: int, seconds: float = 10.0
               ) -> dict[str, float]:
    """Ready tokens/s of Batcher.batch on this host, one core: masked by numpy
    (data.masking=host) and unmasked rows for masking on the device."""
    data = input_pipeline.from_config(with_cache(config, cache_dir), cache_dir)
    rates = {}
    for name, on_device in (("host_masking", False), ("device_masking", True)):
        batcher = data.batcher(batch_size, seed=0, on_device=on_device)
        start, step = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            batcher.batch(step)
            step += 1
        rates[name] = step * batch_size * data.max_seq_length / (time.perf_counter() - start)
    return rates


def main(argv: list[str]) -> None:
    del argv
    config = load_config(FLAGS.config, FLAGS.set)
    cache_dir = tempfile.mkdtemp(prefix="benchmark_loop_cache-")
    input_pipeline.from_config(with_cache(config, cache_dir), cache_dir)
    rates = host_rates(config, cache_dir, FLAGS.host_batch) if FLAGS.host_batch else {}
    for name, rate in rates.items():
        print(f"host input, {name}: {rate / 1e6:.2f}M tokens/s at {FLAGS.host_batch} x "
              f"{config.data.max_seq_length}", flush=True)
    rounds = []
    for i in range(FLAGS.rounds):
        loop = loop_step_time(FLAGS.config, FLAGS.set, cache_dir, FLAGS.steps,
                              FLAGS.log_every)
        bare = bare_step_time(config, cache_dir, FLAGS.steps)
        rounds.append({"loop_s": loop, "bare_s": bare, "ratio": loop / bare})
        print(f"round {i}: train.py {loop * 1e3:.1f} ms/step, bare step {bare * 1e3:.1f} "
              f"ms/step, ratio {loop / bare:.3f}", flush=True)
    result = {"config": FLAGS.config, "set": FLAGS.set, "steps": FLAGS.steps,
              "host_tokens_per_s": rates,
              "devices": str(jax.devices()), "rounds": rounds,
              "median_ratio": statistics.median(r["ratio"] for r in rounds)}
    print(f"median ratio train.py / bare step: {result['median_ratio']:.3f}")
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    define_flags()
    app.run(main)
