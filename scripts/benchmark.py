"""Train-step speed, memory and MFU of our BERT, optionally against Hugging Face's.

  python scripts/benchmark.py --config configs/pretrain.py:size=base --batch 8 --seq_len 128
  python scripts/benchmark.py --config configs/pretrain.py:size=base --batch 8 --seq_len 128 \
      --compare attention=talking_heads --steps 15 --json th_vs_mh.json
  PYTHONPATH=. /tmp/hfvenv/bin/python scripts/benchmark.py --config configs/pretrain.py:size=base \
      --batch 8 --seq_len 128 --vs_hf --dense_mlm --markdown perf.md

What is timed is the real jitted train step (training/steps.py with the
optimizer of training/optimizer.py: AdamW, clipping, fp32 params), donated state,
on one device, fed one synthetic batch that stays on the device: the number is
the model and optimizer, not the input pipeline. Each entry is compiled and
warmed up, then the entries take timed steps in turn (round robin), so a load
change on a shared machine hits all of them alike; ratios against the first
entry come from the same run, and `paired_step_time_ratio` is the median of
per-round ratios, the number to trust when the machine is busy.

Entries: the --config (first, the baseline of every ratio), each --compare,
`--dense_mlm` (ours with MLM logits at every position, as HF's head computes
them) and `--vs_hf` (transformers' FlaxBertForMaskedLM with BERT's sizes taken
from --config; needs transformers 4.x, see docs/PERFORMANCE.md).

Memory: `compiled_bytes` is XLA's own plan for the step (arguments + outputs +
temporaries - donated aliases, from memory_analysis()) on every backend; on GPU
and TPU `device_peak_bytes` is memory_stats()['peak_bytes_in_use'] and on CPU
`process_peak_rss_bytes` is the process high-water mark; both of those are
process-wide peaks, monotone over the entries of one run.

MFU: the analytic train-step FLOPs of models/flops.py divided by the median step
time and by the peak of training/hardware.py. On CPU that peak is hardware.py's
measured fp32 matmul rate, taken once per round between the steps (median), so
that on a shared machine numerator and denominator see the same load.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import resource
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import app, flags

from configs import pretrain as pretrain_configs
from input_pipeline.device_masking import DeviceMasker
from input_pipeline.tokenizer import SpecialIds
from models import BertForMaskedLM, ModelConfig
from models.flops import flop_count
from training import hardware, steps
from training.optimizer import make_optimizer, with_learning_rate

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    flags.DEFINE_string(
        "config", "configs/pretrain.py:size=base",
        "config file[:ARGS], e.g. configs/pretrain.py:size=base,attention=talking_heads")
    flags.DEFINE_multi_string(
        "compare", [],
        "another entry: extra ARGS appended to --config's (attention=talking_heads) or a whole "
        "FILE[:ARGS]; repeatable; ratios are against --config")
    flags.DEFINE_integer("batch", None, "sequences per step (default: the config's batch_size)")
    flags.DEFINE_integer("seq_len", None, "tokens per sequence (default: data.max_seq_length)")
    flags.DEFINE_integer("predictions", None,
                         "MLM targets per sequence (default: data.max_predictions_per_seq)")
    flags.DEFINE_integer("steps", 10, "timed steps per entry (the median is reported)")
    flags.DEFINE_integer("warmup", 3, "untimed steps per entry after compilation")
    flags.DEFINE_bool("vs_hf", False, "add transformers' FlaxBertForMaskedLM (dense MLM loss)")
    flags.DEFINE_bool("device_masking", False,
                      "add ours fed unmasked rows, masking inside the step (data.masking=device); "
                      "its ratio to the first entry is the masking's share of the step")
    flags.DEFINE_bool("dense_mlm", False,
                      "add ours with MLM logits at every position (HF's workload, like for like)")
    flags.DEFINE_float("peak_flops", None, "peak FLOP/s per device for MFU; default: hardware.py")
    flags.DEFINE_string("json", None, "write the results here as JSON")
    flags.DEFINE_string("markdown", None, "write the markdown table here (it is printed anyway)")
    flags.DEFINE_integer("seed", 0, "init, batch and dropout seed")


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BenchmarkError(ValueError):
    """A setting the benchmark cannot run; the message names the flag or field."""


# -- configs ---------------------------------------------------------------------------------
def load_config(spec: str) -> ml_collections.ConfigDict:
    """'FILE[:ARGS]' -> FILE's get_config(ARGS), FILE relative to the cwd or the repo."""
    path, _, arg = spec.partition(":")
    candidates = [path, os.path.join(REPO, path)]
    found = next((p for p in candidates if os.path.isfile(p)), None)
    if found is None:
        raise BenchmarkError(f"--config file {path!r} not found (looked in . and {REPO})")
    module_spec = importlib.util.spec_from_file_location(f"_bench_config_{abs(hash(found))}",
                                                         found)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg or None)


def entry_specs(config: str, compare: list[str]) -> list[str]:
    """--config then each --compare, the latter either ARGS appended or a whole FILE[:ARGS]."""
    specs = [config]
    for extra in compare:
        if ".py" in extra.split(":", 1)[0]:
            specs.append(extra)
        else:
            base_file, _, base_arg = config.partition(":")
            specs.append(f"{base_file}:{','.join(a for a in (base_arg, extra) if a)}")
    return specs


@dataclasses.dataclass(frozen=True)
class Shapes:
    batch: int
    seq_len: int
    predictions: int  # MLM targets per sequence

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len


def resolve_shapes(config: ml_collections.ConfigDict, batch: int | None, seq_len: int | None,
                   predictions: int | None) -> Shapes:
    """Flags first, then the config (configs/pretrain.py fields), then BERT's defaults."""
    data = config.get("data", ml_collections.ConfigDict())
    shapes = Shapes(
        batch=batch or config.get("batch_size", 8),
        seq_len=seq_len or data.get("max_seq_length", 128),
        predictions=predictions or data.get("max_predictions_per_seq", 20),
    )
    model = config.model
    if min(dataclasses.astuple(shapes)) <= 0:
        raise BenchmarkError(f"--batch/--seq_len/--predictions must be positive: {shapes}")
    if shapes.seq_len > model.max_position_embeddings:
        raise BenchmarkError(f"--seq_len={shapes.seq_len} exceeds "
                             f"model.max_position_embeddings={model.max_position_embeddings}")
    if shapes.predictions > shapes.seq_len:
        raise BenchmarkError(
            f"--predictions={shapes.predictions} exceeds --seq_len={shapes.seq_len}")
    return shapes


def optimizer_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The config's optimizer; configs/model.py has none, so pretraining's defaults."""
    return config.optimizer if "optimizer" in config else pretrain_configs.get_config().optimizer


# -- synthetic batch --------------------------------------------------------------------------
def synthetic_batch(shapes: Shapes, vocab_size: int, seed: int) -> dict[str, np.ndarray]:
    """Random ids, no padding, `predictions` distinct masked positions per row (sorted).

    Holds both label layouts: sparse (masked_positions/ids/weights, (B, P)) for our
    step and dense (labels/label_weights, (B, T), weight 1 at the same positions).
    """
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, (shapes.batch, shapes.seq_len), dtype=np.int32)
    positions = np.sort(np.stack([
        rng.choice(shapes.seq_len, shapes.predictions, replace=False)
        for _ in range(shapes.batch)]), axis=1).astype(np.int32)
    masked_ids = rng.integers(1, vocab_size, (shapes.batch, shapes.predictions), dtype=np.int32)
    labels = np.zeros((shapes.batch, shapes.seq_len), np.int32)
    label_weights = np.zeros((shapes.batch, shapes.seq_len), np.float32)
    np.put_along_axis(labels, positions, masked_ids, axis=1)
    np.put_along_axis(label_weights, positions, 1.0, axis=1)
    return {
        "input_ids": ids,
        "token_type_ids": np.zeros_like(ids),
        "attention_mask": np.ones_like(ids),
        "masked_positions": positions,
        "masked_ids": masked_ids,
        "masked_weights": np.ones((shapes.batch, shapes.predictions), np.float32),
        "labels": labels,
        "label_weights": label_weights,
    }


def our_batch(batch: dict[str, np.ndarray], dense: bool) -> dict[str, Any]:
    """The batch training/steps.py expects; dense: no positions, so logits at every token."""
    keys = ("input_ids", "token_type_ids", "attention_mask")
    out: dict[str, Any] = {k: batch[k] for k in keys}
    if dense:
        # masked_positions=None makes BertForMaskedLM score every position; mlm_sums then
        # takes (B, T, V) logits with (B, T) targets and weights.
        out.update(masked_positions=None, masked_ids=batch["labels"],
                   masked_weights=batch["label_weights"])
    else:
        out.update({k: batch[k] for k in ("masked_positions", "masked_ids", "masked_weights")})
    return out


# -- entries -----------------------------------------------------------------------------------
@dataclasses.dataclass
class Entry:
    """One thing to time: a jitted step, its state and batch, and what it should cost."""

    name: str
    spec: str  # config spec or a description
    step: Callable[[Any, Any], tuple[Any, Any]]  # jitted, state donated
    state: Any
    batch: Any
    flops: float  # analytic train-step FLOPs (models/flops.py)
    mlm_predictions: int  # positions the MLM head scores per step
    num_params: int
    compiled: Any = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    times: list[float] = dataclasses.field(default_factory=list)


def count_params(params: Any) -> int:
    return int(sum(x.size for x in jax.tree.leaves(params)))


def our_entry(name: str, spec: str, cfg: ModelConfig, opt_cfg: ml_collections.ConfigDict,
              shapes: Shapes, batch: dict[str, np.ndarray], seed: int, dense: bool,
              device_masking: bool = False) -> Entry:
    model = BertForMaskedLM(cfg)
    # The schedule's length does not change the step's cost; only its shape must be valid.
    total_steps = max(int(opt_cfg.warmup_steps) + 1, 1000)
    optimizer, schedule = make_optimizer(opt_cfg, total_steps)

    def init_state(rng: jax.Array) -> dict[str, Any]:
        ids = jnp.zeros((1, shapes.seq_len), jnp.int32)
        positions = jnp.zeros((1, shapes.predictions), jnp.int32)
        params = nn.unbox(model.init(rng, ids, ids, ids, positions)["params"])
        return {"step": jnp.zeros((), jnp.int32), "params": params,
                "opt_state": optimizer.init(params)}

    state = jax.jit(init_state)(jax.random.key(seed))
    masker, fed = None, our_batch(batch, dense)
    if device_masking:
        # The host's whole share: unmasked rows and one stream id per row.
        masker = DeviceMasker(SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4), cfg.vocab_size,
                              shapes.predictions)
        fed = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
        fed["mask_stream"] = np.stack([np.full(shapes.batch, seed), np.ones(shapes.batch),
                                       np.zeros(shapes.batch), np.arange(shapes.batch)],
                                      axis=1).astype(np.int32)
    train_step = steps.make_train_step(model, optimizer, schedule, seed, masker=masker)
    predictions = shapes.tokens if dense else shapes.batch * shapes.predictions
    return Entry(
        name=name, spec=spec, step=jax.jit(train_step, donate_argnums=(0,)), state=state,
        batch=jax.device_put(fed),
        flops=flop_count(cfg, shapes.seq_len).train_step(shapes.tokens, predictions),
        mlm_predictions=predictions, num_params=count_params(state["params"]),
        info={"model": cfg.to_dict()},
    )


def import_transformers_flax() -> Any:
    """transformers, imported only for --vs_hf; one clear error where it has no Flax BERT."""
    try:
        import transformers
        from transformers import FlaxBertForMaskedLM  # noqa: F401  (absent in transformers 5)
    except ImportError as e:
        raise BenchmarkError(
            f"--vs_hf needs transformers 4.x with Flax classes (FlaxBertForMaskedLM): {e}. "
            "transformers 5 dropped Flax; install 4.57.6 in its own venv, see "
            "docs/PERFORMANCE.md") from e
    return transformers


def hf_entry(cfg: ModelConfig, opt_cfg: ml_collections.ConfigDict, shapes: Shapes,
             batch: dict[str, np.ndarray], seed: int) -> Entry:
    """transformers' FlaxBertForMaskedLM, trained the way its examples do (run_mlm_flax):
    logits at every position, cross-entropy weighted by the label mask, same optax AdamW."""
    transformers = import_transformers_flax()
    BertConfig, FlaxBertForMaskedLM = transformers.BertConfig, transformers.FlaxBertForMaskedLM
    if cfg.attention != "multi_head" or cfg.key_size or cfg.value_size:
        raise BenchmarkError("--vs_hf compares standard BERT: the --config must be multi_head "
                             "with key_size/value_size unset")
    hf_config = BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, intermediate_size=cfg.mlp_dim,
        max_position_embeddings=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
        hidden_dropout_prob=cfg.dropout_rate,
        attention_probs_dropout_prob=cfg.attention_dropout_rate,
        layer_norm_eps=cfg.layer_norm_eps, initializer_range=cfg.initializer_range,
        hidden_act="gelu",  # exact GELU, as ours
    )
    hf_model = FlaxBertForMaskedLM(hf_config, input_shape=(1, shapes.seq_len), seed=seed,
                                   dtype=jnp.float32)
    total_steps = max(int(opt_cfg.warmup_steps) + 1, 1000)
    optimizer, schedule = make_optimizer(opt_cfg, total_steps)
    params = jax.tree.map(jnp.asarray, hf_model.params)

    def loss_fn(params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> jax.Array:
        logits = hf_model(batch["input_ids"], attention_mask=batch["attention_mask"],
                          token_type_ids=batch["token_type_ids"], params=params,
                          dropout_rng=rng, train=True)[0]  # (B, T, vocab)
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
        weights = batch["label_weights"]
        return jnp.sum(losses * weights) / jnp.maximum(jnp.sum(weights), 1.0)

    def train_step(state: dict[str, Any], batch: dict[str, jax.Array]):
        rng = jax.random.fold_in(jax.random.key(seed), state["step"])
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch, rng)
        # The same optimizer and rate handling as training/steps.py, so both sides match.
        opt_state = with_learning_rate(state["opt_state"], schedule(state["step"]))
        updates, opt_state = optimizer.update(grads, opt_state, state["params"])
        new_params = optax.apply_updates(state["params"], updates)
        return ({"step": state["step"] + 1, "params": new_params, "opt_state": opt_state},
                {"loss": loss, "learning_rate": schedule(state["step"])})

    state = {"step": jnp.zeros((), jnp.int32), "params": params,
             "opt_state": jax.jit(optimizer.init)(params)}
    keys = ("input_ids", "token_type_ids", "attention_mask", "labels", "label_weights")
    return Entry(
        name="hf_flax_bert", spec=f"transformers {transformers.__version__} FlaxBertForMaskedLM",
        step=jax.jit(train_step, donate_argnums=(0,)), state=state,
        batch=jax.device_put({k: batch[k] for k in keys}),
        # HF's head scores every position; the pooler is absent (a rounding error here).
        flops=flop_count(cfg, shapes.seq_len).train_step(shapes.tokens, shapes.tokens),
        mlm_predictions=shapes.tokens, num_params=count_params(params),
        info={"transformers": transformers.__version__},
    )


# -- measuring ---------------------------------------------------------------------------------
def cost_analysis(compiled: Any) -> dict[str, float]:
    costs = compiled.cost_analysis()
    if isinstance(costs, list):  # older jax: one dict per partition
        costs = costs[0] if costs else {}
    costs = costs or {}
    return {"xla_flops": float(costs.get("flops", float("nan"))),
            "xla_bytes_accessed": float(costs.get("bytes accessed", float("nan")))}


def memory_analysis(compiled: Any) -> dict[str, int]:
    """XLA's buffer plan for the step; `compiled_bytes` is its peak (aliases count once)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return {}
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
              "temp_size_in_bytes", "generated_code_size_in_bytes")
    out = {f: int(getattr(stats, f, 0)) for f in fields}
    out["compiled_bytes"] = (out["argument_size_in_bytes"] + out["output_size_in_bytes"]
                             - out["alias_size_in_bytes"] + out["temp_size_in_bytes"])
    return out


def hlo_op_counts(compiled: Any) -> dict[str, Any]:
    """Op counts of the optimized HLO, to see where two steps differ.

    `executed`: opcodes run directly (the entry and while/call bodies; a fusion is
    one kernel). `fusion_kinds`: kLoop/kInput/kOutput/kCustom (YNNPACK dots on CPU).
    `dots`: dot instructions anywhere, fused or not.
    """
    text = compiled.as_text() or ""
    computations: dict[str, list[tuple[str, str]]] = {}
    current = None
    called = set()  # fusion bodies and reducers: not executed as ops of their own
    for line in text.splitlines():
        header = re.match(r"^(ENTRY\s+)?%(\S+)\s*\(.*\{\s*$", line)
        if header:
            current = computations.setdefault(header.group(2), [])
            continue
        inst = re.match(r"^\s*(?:ROOT\s+)?%\S+ = .*?\s([a-z][a-z0-9\-]*)\((.*)$", line)
        if current is None or not inst:
            continue
        current.append((inst.group(1), inst.group(2)))
        called.update(re.findall(r"(?:calls|to_apply)=%([\w.\-]+)", inst.group(2)))
    executed: dict[str, int] = {}
    fusion_kinds: dict[str, int] = {}
    dots = 0
    for name, instructions in computations.items():
        for opcode, rest in instructions:
            dots += opcode in ("dot", "convolution")
            if name in called:
                continue
            executed[opcode] = executed.get(opcode, 0) + 1
            if opcode == "fusion":
                kind = re.search(r"kind=(\w+)", rest)
                key = kind.group(1) if kind else "?"
                fusion_kinds[key] = fusion_kinds.get(key, 0) + 1
    return {"executed": dict(sorted(executed.items(), key=lambda kv: -kv[1])),
            "fusion_kinds": fusion_kinds, "dots": dots}


def device_peak_bytes(device: jax.Device) -> int | None:
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def process_peak_rss_bytes() -> int:
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is KiB on Linux
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


def progress(message: str) -> None:
    """A line on stderr, so stdout stays the table."""
    print(f"[benchmark] {message}", file=sys.stderr, flush=True)


def run_step(entry: Entry) -> float:
    start = time.perf_counter()
    entry.state, metrics = entry.compiled(entry.state, entry.batch)
    jax.block_until_ready((entry.state, metrics))
    return time.perf_counter() - start


def compile_and_warm(entry: Entry, warmup: int, device: jax.Device) -> None:
    start = time.perf_counter()
    entry.compiled = entry.step.lower(entry.state, entry.batch).compile()
    entry.info["compile_s"] = time.perf_counter() - start
    entry.info.update(cost_analysis(entry.compiled))
    entry.info["memory"] = memory_analysis(entry.compiled)
    entry.info["hlo_op_counts"] = hlo_op_counts(entry.compiled)
    entry.info["first_step_s"] = run_step(entry)
    for _ in range(max(warmup - 1, 0)):
        run_step(entry)
    entry.info["device_peak_bytes_after_warmup"] = device_peak_bytes(device)
    progress(f"{entry.name}: compiled in {entry.info['compile_s']:.1f}s, first step "
             f"{entry.info['first_step_s']:.2f}s")


def measure_cpu_peak() -> float:
    """hardware.py's matmul measurement (best of 3 fp32 2048^3), uncached: the load changes."""
    return hardware.measured_matmul_flops.__wrapped__(2048, 3)


def time_round_robin(entries: list[Entry], steps_per_entry: int,
                     measure_peak: Callable[[], float] | None = None) -> list[float]:
    """Each round runs one step of every entry, so slow spells of a shared machine are shared.

    `measure_peak` (CPU) is called once per round too: the MFU denominator then sees
    the same machine load as the steps. Returns its values.
    """
    peaks = []
    for round_index in range(steps_per_entry):
        for entry in entries:
            entry.times.append(run_step(entry))
        if measure_peak is not None:
            peaks.append(measure_peak())
        progress(f"round {round_index + 1}/{steps_per_entry}: "
                 + ", ".join(f"{e.name} {e.times[-1]:.3f}s" for e in entries)
                 + (f", matmul {peaks[-1] / 1e9:.1f} GFLOP/s" if peaks else ""))
    return peaks


def summarize(entries: list[Entry], shapes: Shapes, peak: float) -> list[dict[str, Any]]:
    base = entries[0]
    rows = []
    for entry in entries:
        median = statistics.median(entry.times)
        paired = [t / b for t, b in zip(entry.times, base.times, strict=True)]
        rows.append({
            "name": entry.name,
            "spec": entry.spec,
            "num_params": entry.num_params,
            "mlm_predictions_per_step": entry.mlm_predictions,
            "step_time_median_s": median,
            "step_time_min_s": min(entry.times),
            "step_time_max_s": max(entry.times),
            "step_time_mean_s": statistics.fmean(entry.times),
            "step_times_s": entry.times,
            "tokens_per_s": shapes.tokens / median,
            "flops_per_step": entry.flops,
            "achieved_flops_per_s": entry.flops / median,
            "mfu": entry.flops / median / peak,
            # Ratios against the first entry; paired = median over rounds of the per-round ratio.
            "step_time_ratio": median / statistics.median(base.times),
            "throughput_ratio": statistics.median(base.times) / median,
            "paired_step_time_ratio": statistics.median(paired),
            **entry.info,
        })
    return rows


def markdown_table(result: dict[str, Any]) -> str:
    """One row per entry; ratios are against the first row, from the same process."""
    lines = [
        f"batch {result['batch']} x seq_len {result['seq_len']}, "
        f"{result['steps']} timed steps after {result['warmup']} warm-up, device "
        f"{result['device']}, peak {result['peak_flops_per_s'] / 1e9:.1f} GFLOP/s "
        f"({result['peak_flops_source']}); 1-min load average "
        f"{result['load_average_1min']['start']:.1f} at start, "
        f"{result['load_average_1min']['end']:.1f} at end",
        "",
        "| entry | MLM positions | median step (s) | min-max (s) | tokens/s | step time vs "
        "first (paired) | throughput vs first | GFLOP/step | GFLOP/s | MFU | XLA plan (GiB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["entries"]:
        memory = r.get("memory", {}).get("compiled_bytes")
        lines.append(
            f"| {r['name']} | {r['mlm_predictions_per_step']} | {r['step_time_median_s']:.3f} | "
            f"{r['step_time_min_s']:.3f}-{r['step_time_max_s']:.3f} | {r['tokens_per_s']:.0f} | "
            f"{r['step_time_ratio']:.3f} ({r['paired_step_time_ratio']:.3f}) | "
            f"{r['throughput_ratio']:.3f} | {r['flops_per_step'] / 1e9:.1f} | "
            f"{r['achieved_flops_per_s'] / 1e9:.1f} | {100 * r['mfu']:.1f}% | "
            f"{'-' if memory is None else f'{memory / 2**30:.2f}'} |")
    return "\n".join(lines)


# -- entry point ---------------------------------------------------------------------------------
def benchmark(config: str, compare: list[str], batch: int | None, seq_len: int | None,
              predictions: int | None, num_steps: int, warmup: int, vs_hf: bool,
              dense_mlm: bool, peak_flops: float | None, seed: int,
              device_masking: bool = False) -> dict[str, Any]:
    """Builds every entry, times them round robin, returns the JSON-ready result."""
    if num_steps <= 0 or warmup < 0:
        raise BenchmarkError(f"--steps={num_steps} must be > 0 and --warmup={warmup} >= 0")
    specs = entry_specs(config, compare)
    configs = [load_config(s) for s in specs]
    shapes = resolve_shapes(configs[0], batch, seq_len, predictions)
    model_cfgs = [ModelConfig.from_config(c.model) for c in configs]
    for spec, cfg in zip(specs, model_cfgs, strict=True):
        if shapes.seq_len > cfg.max_position_embeddings:
            raise BenchmarkError(f"{spec}: --seq_len={shapes.seq_len} exceeds "
                                 f"max_position_embeddings={cfg.max_position_embeddings}")
    if len({cfg.vocab_size for cfg in model_cfgs}) != 1:
        raise BenchmarkError("every entry needs the same model.vocab_size (one synthetic batch)")
    if vs_hf:
        import_transformers_flax()  # fail before anything is built
    data = synthetic_batch(shapes, model_cfgs[0].vocab_size, seed)
    device = jax.devices()[0]
    load_before = os.getloadavg()  # other processes' CPU demand shows in the times

    entries = []
    names = ["ours"] + [f"ours[{extra}]" for extra in compare]
    for name, spec, cfg, c in zip(names, specs, model_cfgs, configs, strict=True):
        entries.append(our_entry(name, spec, cfg, optimizer_config(c), shapes, data, seed, False))
    if device_masking:
        entries.append(our_entry("ours_device_masking", specs[0], model_cfgs[0],
                                 optimizer_config(configs[0]), shapes, data, seed, False,
                                 device_masking=True))
    if dense_mlm:
        entries.append(our_entry("ours_dense_mlm", specs[0], model_cfgs[0],
                                 optimizer_config(configs[0]), shapes, data, seed, True))
    if vs_hf:
        entries.append(hf_entry(model_cfgs[0], optimizer_config(configs[0]), shapes, data, seed))

    for entry in entries:
        compile_and_warm(entry, warmup, device)
    measure_peak = measure_cpu_peak if not peak_flops and device.platform == "cpu" else None
    peaks = time_round_robin(entries, num_steps, measure_peak)

    if peak_flops:
        peak, source = peak_flops, "--peak_flops"
    elif peaks:
        peak = statistics.median(peaks)
        source = "median over rounds of a measured 2048^3 fp32 matmul, same load as the steps"
    else:
        peak, source = hardware.peak_flops_per_device(device), f"{device.device_kind} bf16 peak"
    result: dict[str, Any] = {
        "batch": shapes.batch, "seq_len": shapes.seq_len, "predictions": shapes.predictions,
        "tokens_per_step": shapes.tokens, "steps": num_steps, "warmup": warmup,
        "device": f"{device.platform}:{device.device_kind}", "cpu_count": os.cpu_count(),
        "jax": jax.__version__, "peak_flops_per_s": peak, "peak_flops_source": source,
        "peak_flops_per_round": peaks,
        "load_average_1min": {"start": load_before[0], "end": os.getloadavg()[0]},
        "process_peak_rss_bytes": process_peak_rss_bytes(),
        "device_peak_bytes": device_peak_bytes(device),
        "entries": summarize(entries, shapes, peak),
    }
    by_name = {r["name"]: r for r in result["entries"]}
    if "hf_flax_bert" in by_name:
        hf = by_name["hf_flax_bert"]
        # Ours / HF throughput, same shapes, same run (> 1: ours is faster).
        result["vs_hf"] = {
            name: hf["step_time_median_s"] / r["step_time_median_s"]
            for name, r in by_name.items() if name != "hf_flax_bert"}
        # The same ratio round by round (median): robust to load that drifts during the run.
        result["vs_hf_paired"] = {
            name: statistics.median(h / t for h, t in zip(hf["step_times_s"], r["step_times_s"],
                                                            strict=True))
            for name, r in by_name.items() if name != "hf_flax_bert"}
    return result


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    try:
        result = benchmark(FLAGS.config, FLAGS.compare, FLAGS.batch, FLAGS.seq_len,
                           FLAGS.predictions, FLAGS.steps, FLAGS.warmup, FLAGS.vs_hf,
                           FLAGS.dense_mlm, FLAGS.peak_flops, FLAGS.seed,
                           FLAGS.device_masking)
    except (BenchmarkError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    table = markdown_table(result)
    print(table)
    for name, ratio in result.get("vs_hf", {}).items():
        print(f"{name} vs hf_flax_bert: {ratio:.3f}x throughput "
              f"(paired per round: {result['vs_hf_paired'][name]:.3f}x)")
    if FLAGS.markdown:
        with open(FLAGS.markdown, "w") as f:
            f.write(table + "\n")
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(result, f, indent=2, default=str)


if __name__ == "__main__":
    define_flags()
    app.run(main)
