"""What the dropout PRNG costs: the train step compiled and run for each config.dropout_prng.

  python scripts/prng_cost.py --config configs/pretrain.py:size=base --batch 8 --seq_len 128
  python scripts/prng_cost.py --config configs/pretrain.py:size=mini --batch 8 --seq_len 64 \
      --choices threefry,rbg --json prng.json

The step is training/steps.py's MLM train step as train.py builds it (AdamW, clipping,
fp32 parameters, donated state) on one device, fed one synthetic masked batch (masking
on the device, whose draws stay on threefry whatever the choice, only with
--device_masking). Per choice: the optimized HLO's size (characters and instructions,
fusion bodies included), its instructions from jax's threefry hash (op_name metadata)
and its rng-bit-generator instructions, XLA's plan for its temporaries, the seconds to
lower and to compile (the persistent compilation cache off, so a compile is a compile),
and the median step time, the choices stepping in turn (round robin) once all are
compiled, with each one's paired ratio to threefry.
`off` is the floor: the same step with every dropout rate 0, which draws nothing.

Choices: off, threefry, rbg, unsafe_rbg; threefry_gpu_kernel on GPU (the same bits as
threefry; jax_threefry_gpu_kernel_lowering changes nothing elsewhere). The markdown table
goes to stdout, progress to stderr. scripts/accelerator_check.py calls measure().
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFF = "off"  # every dropout rate 0: the step without a dropout mask
FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only (see
    tests/test_scripts_import.py)."""
    flags.DEFINE_string("config", "configs/pretrain.py:size=base", "FILE[:ARGS], a pretraining "
                        "config and its args")
    flags.DEFINE_integer("batch", 8, "sequences per step")
    flags.DEFINE_integer("seq_len", 128, "tokens per sequence")
    flags.DEFINE_list("choices", None, "dropout PRNGs to measure (default: off, threefry, rbg, "
                      "unsafe_rbg, and threefry_gpu_kernel on GPU)")
    flags.DEFINE_integer("steps", 3, "timed steps per choice, taken in turn (after one "
                         "untimed round)")
    flags.DEFINE_bool("device_masking", False, "mask the batch inside the step, as train.py "
                      "does (threefry draws in every choice)")
    flags.DEFINE_string("json", None, "write the rows and the header here")


def default_choices(platform: str | None = None) -> list[str]:
    """off and every dropout_prng that draws other code on this backend."""
    import jax

    platform = platform or jax.default_backend()
    choices = [OFF, "threefry", "rbg", "unsafe_rbg"]
    if platform in ("gpu", "cuda", "rocm"):
        choices.append("threefry_gpu_kernel")
    return choices


# -- the optimized HLO ------------------------------------------------------------------------
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%\S+ = ")
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def hlo_counts(text: str) -> dict[str, int]:
    """Characters and instructions of an optimized HLO module (fusion bodies included),
    and the instructions that came from a PRNG by their op_name metadata: threefry (jax's
    _threefry_split, _threefry_fold_in, _threefry_random_bits: the hash, or on GPU with
    the kernel lowering its custom call) and rng_bit_generator (rbg, unsafe_rbg: the
    rng-bit-generator op, or the loops XLA's CPU backend expands it into)."""
    lines = [line for line in text.splitlines() if _INSTRUCTION.match(line)]
    names = [(m.group(1) if (m := _OP_NAME.search(line)) else "") for line in lines]
    return {"hlo_chars": len(text), "hlo_ops": len(lines),
            "threefry_ops": sum("threefry" in name for name in names),
            "rng_bit_generator_ops": sum(
                "rng_bit_generator" in name or " rng-bit-generator(" in line
                for name, line in zip(names, lines, strict=True))}


# -- one choice -------------------------------------------------------------------------------
@contextlib.contextmanager
def gpu_kernel_lowering_kept() -> Iterator[None]:
    """jax_threefry_gpu_kernel_lowering as it was before, after (threefry_gpu_kernel sets
    it for the process: the choices after it must not inherit it)."""
    import jax

    before = jax.config.jax_threefry_gpu_kernel_lowering
    try:
        yield
    finally:
        jax.config.update("jax_threefry_gpu_kernel_lowering", before)


@dataclasses.dataclass
class Entry:
    """One choice's compiled step, its state and batch, and what was measured."""

    row: dict[str, Any]
    compiled: Any
    state: Any
    batch: Any
    times: list[float] = dataclasses.field(default_factory=list)

    def step(self) -> float:
        import jax

        start = time.perf_counter()
        self.state, metrics = self.compiled(self.state, self.batch)
        jax.block_until_ready((self.state, metrics))
        self.row["loss_sum"] = float(metrics["loss_sum"])
        return time.perf_counter() - start


def compile_one(config, choice: str, batch: int, seq_len: int,
                device_masking: bool = False) -> Entry:
    """The step of one choice lowered and compiled (the persistent cache off), its HLO
    counted; its state initialised (the same parameters for every choice)."""
    import jax

    from common import compile_cache
    from models import ModelConfig
    from scripts import benchmark
    from training import steps as train_steps

    model_cfg = ModelConfig.from_config(config.model)
    if choice == OFF:
        model_cfg = model_cfg.replace(dropout_rate=0.0, attention_dropout_rate=0.0)
    shapes = benchmark.Shapes(batch, seq_len, min(int(config.data.max_predictions_per_seq),
                                                  seq_len))
    data = benchmark.synthetic_batch(shapes, model_cfg.vocab_size, seed=0)
    with gpu_kernel_lowering_kept():
        # benchmark.py's step (the same model, optimizer, batch and device masking), with
        # this choice's dropout keys.
        step, init_state, fed = benchmark.our_step(
            model_cfg, config.optimizer, shapes, data, seed=0, dense=False,
            device_masking=device_masking,
            dropout_prng=train_steps.DEFAULT_DROPOUT_PRNG if choice == OFF else choice)
        fed = jax.device_put(fed)
        state = jax.jit(init_state)(jax.random.key(0))
        with compile_cache.disabled():
            start = time.perf_counter()
            lowered = step.lower(state, fed)
            lower_s = time.perf_counter() - start
            start = time.perf_counter()
            compiled = lowered.compile()
            compile_s = time.perf_counter() - start
    memory = compiled.memory_analysis()
    row = {"dropout_prng": choice, **hlo_counts(compiled.as_text() or ""),
           "temp_bytes": int(getattr(memory, "temp_size_in_bytes", 0)) if memory else None,
           "lower_s": lower_s, "compile_s": compile_s}
    return Entry(row, compiled, state, fed)


def measure(config_spec: str, batch: int = 8, seq_len: int = 128,
            choices: Sequence[str] | None = None, steps: int = 3,
            device_masking: bool = False) -> list[dict[str, Any]]:
    """One row per choice (default_choices() when None), in order: dropout_prng,
    hlo_chars, hlo_ops, threefry_ops, rng_bit_generator_ops, temp_bytes (XLA's plan for the
    step's temporaries: the kernel lowering may cost memory), lower_s, compile_s, step_s
    (median of `steps` timed steps; None when steps=0), step_times_s, step_vs_threefry
    (the median over rounds of the round's ratio to threefry's step; None without a
    threefry row), loss_sum. Every choice is compiled first; then the choices take their
    steps in turn, one each per round after an untimed round, so a load change on a
    shared machine hits all of them alike. `config_spec`: 'FILE[:ARGS]' of a pretraining
    config (configs/pretrain.py:size=base)."""
    from scripts import benchmark
    from training.steps import dropout_prng_identity

    config = benchmark.load_config(config_spec)
    choices = list(choices or default_choices())
    for choice in choices:
        if choice != OFF:
            dropout_prng_identity(choice)  # an unknown one: ValueError naming it
    entries = []
    for choice in choices:
        entries.append(compile_one(config, choice, batch, seq_len, device_masking))
        progress(f"{choice}: compiled in {entries[-1].row['compile_s']:.1f} s")
    for _ in range(steps + 1):  # the first round untimed: allocation and warm-up
        for entry in entries:
            entry.times.append(entry.step())
    base = next((e for e in entries if e.row["dropout_prng"] == "threefry"), None)
    for entry in entries:
        times = entry.times[1:]
        entry.row.update(step_s=statistics.median(times) if times else None,
                         step_times_s=times, step_vs_threefry=statistics.median(
                             [t / b for t, b in zip(times, base.times[1:], strict=True)])
                         if base is not None and times else None)
        progress(f"{entry.row['dropout_prng']}: step {entry.row['step_s'] or float('nan'):.3f} s")
    return [entry.row for entry in entries]


def markdown(rows: list[dict[str, Any]], header: dict[str, Any]) -> str:
    lines = [" ".join(f"{k}={v}" for k, v in header.items()), "",
             "| dropout_prng | HLO chars | HLO ops | threefry ops | rng-bit-generator ops | "
             "temp MiB | lower s | compile s | step s | step vs threefry (paired) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = f"{r['step_vs_threefry']:.2f}x" if r.get("step_vs_threefry") else "-"
        step = f"{r['step_s']:.3f}" if r["step_s"] else "-"
        temp = f"{r['temp_bytes'] / 2**20:,.0f}" if r.get("temp_bytes") is not None else "-"
        lines.append(f"| {r['dropout_prng']} | {r['hlo_chars']:,} | {r['hlo_ops']:,} | "
                     f"{r['threefry_ops']:,} | {r['rng_bit_generator_ops']:,} | {temp} | "
                     f"{r['lower_s']:.1f} | {r['compile_s']:.1f} | {step} | {ratio} |")
    return "\n".join(lines)


def progress(message: str) -> None:
    print(f"[prng_cost] {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)
    import jax

    from common.files import write_json_atomic

    device = jax.devices()[0]
    header = {"config": FLAGS.config, "batch": FLAGS.batch, "seq_len": FLAGS.seq_len,
              "device_masking": FLAGS.device_masking, "backend": jax.default_backend(),
              "device": getattr(device, "device_kind", str(device)),
              "jax": jax.__version__, "load_at_start": os.getloadavg()[0]}
    rows = measure(FLAGS.config, FLAGS.batch, FLAGS.seq_len, FLAGS.choices, FLAGS.steps,
                   FLAGS.device_masking)
    header["load_at_end"] = os.getloadavg()[0]
    print(markdown(rows, header), flush=True)
    if FLAGS.json:
        write_json_atomic(FLAGS.json, {"header": header, "rows": rows})


if __name__ == "__main__":
    define_flags()
    app.run(main)
