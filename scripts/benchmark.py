"""Train-step speed, memory, compile time and MFU of our BERT, optionally against
transformers' PyTorch BertForMaskedLM.

  python scripts/benchmark.py --config configs/pretrain.py:size=base --batch 8 --seq_len 128
  python scripts/benchmark.py --config configs/pretrain.py:size=base --batch 8 --seq_len 128 \
      --compare attention=talking_heads --steps 15 --json th_vs_mh.json
  python scripts/benchmark.py --config configs/pretrain.py:size=base,dtype=bfloat16 \
      --batch 256 --seq_len 128 --vs_torch --torch_compile --dense_mlm --budget_s 200 \
      --json perf.json --markdown perf.md

What is timed is the real jitted train step (training/steps.py with the
optimizer of training/optimizer.py: AdamW, clipping, fp32 params), donated state,
on one device, fed one synthetic batch that stays on the device: the number is
the model and optimizer, not the input pipeline.

One entry at a time: each entry is built (parameters and optimizer state on the
device: `build_s`), lowered and compiled ahead of time (`jit(...).lower(...)
.compile()`: `lower_s` and `compile_s`, apart from the first step), warmed up,
timed, written to --json and --markdown (atomically: a run cut short keeps every
entry that finished) and released, before the next entry is built. Nothing waits
for all entries to be built.

Paired ratios: the first entry (--config) stays built. Each later entry's timed
steps alternate with steps of the first entry (first/entry, then entry/first, ...),
so load changes on a shared machine hit both alike; `paired_step_time_ratio` is
the median over those rounds of entry/first, the ratio to trust on a busy
machine. `--nopaired` times each entry alone (the first entry's steps then run
once, not once per entry). The first entry's own timed steps come first.

Entries, in this order: the --config (first, the baseline of every ratio);
`--vs_torch` and `--torch_compile` (transformers' PyTorch BertForMaskedLM at the
config's sizes, eager and under torch.compile: scripts/torch_peer.py, imported only
for these flags; the anchor of every `vs torch` ratio, so they come early); each
--compare; `--device_masking` (ours fed unmasked rows, masking inside the step);
`--dense_mlm` (ours with MLM logits at every position). benchmark()'s `order` lets a
caller move named entries forward (scripts/accelerator_check.py does).

MLM head: ours computes logits only at the B*P masked positions (the sparse
head); `--dense_mlm` and the PyTorch peer compute them at all B*T positions, so
`ours_dense_mlm` vs torch is the like-for-like ratio and `ours` vs torch includes
the sparse head's saving. The table says which head each row has.

Budget: `--budget_s` bounds the whole run. Before an entry starts, its cost is
estimated as the longest finished entry of its kind (ours / torch eager / torch
compiled), else the longest finished entry (less its compile, for the eager peer);
an entry whose estimate exceeds the seconds left is skipped, printed and recorded
under `skipped` with the reason. An entry's timed steps also stop once the budget
is spent (at least 2; recorded as `timed_steps_cut_by_budget`). An entry that fails
(out of memory, say) is recorded under `failed` and the run goes on; the first
entry's failure ends the run.

Memory: `compiled_bytes` is XLA's own plan for the step (arguments + outputs +
temporaries - donated aliases, from memory_analysis()) on every backend; on GPU
and TPU `device_peak_bytes` is memory_stats()['peak_bytes_in_use'] and on CPU
`process_peak_rss_bytes` is the process high-water mark; both of those are
process-wide peaks, monotone over the entries of one run. The torch peer's
`peak_memory_bytes` is torch.cuda.max_memory_allocated() since it was built on
CUDA, and the process RSS high-water mark on CPU.

MFU: the analytic train-step FLOPs of models/flops.py divided by the median step
time and by the peak of training/hardware.py. The torch peer's FLOPs are the
dense-head count (train_step with MLM logits at all B*T positions), as for
`ours_dense_mlm`, so its MFU is comparable (`flops_basis` says which count a row
uses). On CPU the peak is hardware.py's measured fp32 matmul rate, taken once per
round between the steps (median per entry), so that on a shared machine numerator
and denominator see the same load.

Compilation: main() turns on the persistent compilation cache
(common/compile_cache.py; `--jax_cache`, default auto, `none` turns it off). A
cached program's `compile_s` is a cache read, not a compile: pass
`--jax_cache=none` to measure cold compiles.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
import resource
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags

from common import compile_cache
from common.files import write_json_atomic, write_text_atomic
from configs import pretrain as pretrain_configs
from input_pipeline.device_masking import DeviceMasker
from input_pipeline.tokenizer import SpecialIds
from models import BertForMaskedLM, ModelConfig
from models.flops import flop_count
from training import hardware, steps
from training.optimizer import make_optimizer

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
    flags.DEFINE_bool("vs_torch", False,
                      "add transformers' PyTorch BertForMaskedLM, eager (SDPA attention, bf16 "
                      "autocast for dtype=bfloat16, AdamW fused on CUDA; MLM logits at all "
                      "positions); needs torch and transformers")
    flags.DEFINE_bool("torch_compile", False,
                      "add the same PyTorch peer under torch.compile (with --vs_torch: both)")
    flags.DEFINE_bool("device_masking", False,
                      "add ours fed unmasked rows, masking inside the step (data.masking=device); "
                      "its ratio to the first entry is the masking's share of the step")
    flags.DEFINE_bool("dense_mlm", False,
                      "add ours with MLM logits at every position (the PyTorch peer's workload)")
    flags.DEFINE_bool("paired", True,
                      "alternate each later entry's timed steps with the first entry's")
    flags.DEFINE_float("budget_s", None,
                       "seconds for the whole run: an entry estimated not to fit in what is "
                       "left is skipped (and recorded as skipped)")
    flags.DEFINE_string("jax_cache", compile_cache.AUTO,
                        "persistent compilation cache folder; auto: $JAX_COMPILATION_CACHE_DIR "
                        "or the user cache; none: off (cold compiles)")
    flags.DEFINE_float("peak_flops", None, "peak FLOP/s per device for MFU; default: hardware.py")
    flags.DEFINE_string("json", None, "write the results here as JSON (after every entry)")
    flags.DEFINE_string("markdown", None, "write the markdown table here (it is printed anyway)")
    flags.DEFINE_integer("seed", 0, "init, batch and dropout seed")


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_EAGER, TORCH_COMPILED = "torch_eager", "torch_compiled"


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


def schedule_steps(opt_cfg: ml_collections.ConfigDict) -> int:
    """The schedule's length: it does not change a step's cost; only its shape must be valid."""
    return max(int(opt_cfg.warmup_steps) + 1, 1000)


# -- synthetic batch --------------------------------------------------------------------------
def synthetic_batch(shapes: Shapes, vocab_size: int, seed: int) -> dict[str, np.ndarray]:
    """Random ids, no padding, `predictions` distinct masked positions per row (sorted).

    Holds both label layouts: sparse (masked_positions/ids/weights, (B, P)) for our
    step and dense (labels/label_weights, (B, T), weight 1 at the same positions) for
    ours with the dense head and the PyTorch peer.
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
OURS, DENSE = "ours", "dense"  # flops_basis values: B*P MLM positions, or all B*T


class JaxRunner:
    """Our jitted step with its state and batch: compiled ahead of time by prepare()."""

    def __init__(self, step_fn: Callable[[Any, Any], tuple[Any, Any]], state: Any, batch: Any):
        self.step_fn = step_fn  # jitted, state donated
        self.state = state
        self.batch = batch
        self.compiled: Any = None
        self.metrics: Any = None

    def prepare(self, warmup: int) -> dict[str, Any]:
        """Lowers and compiles (timed apart), runs the first step and the warm-up."""
        info: dict[str, Any] = {}
        start = time.perf_counter()
        lowered = self.step_fn.lower(self.state, self.batch)
        info["lower_s"] = time.perf_counter() - start
        start = time.perf_counter()
        self.compiled = lowered.compile()
        info["compile_s"] = time.perf_counter() - start
        info.update(cost_analysis(self.compiled))
        info["memory"] = memory_analysis(self.compiled)
        info["hlo_op_counts"] = hlo_op_counts(self.compiled)
        info["first_step_s"] = self.step()
        info["loss_first_step"] = self.loss()
        start = time.perf_counter()
        for _ in range(max(warmup - 1, 0)):
            self.step()
        info["warmup_s"] = info["first_step_s"] + time.perf_counter() - start
        return info

    def step(self) -> float:
        start = time.perf_counter()
        self.state, self.metrics = self.compiled(self.state, self.batch)
        jax.block_until_ready((self.state, self.metrics))
        return time.perf_counter() - start

    def loss(self) -> float:
        m = self.metrics
        return float(m["loss_sum"] / jnp.maximum(m["weight"], 1.0)) if m else float("nan")

    def peak_memory_bytes(self) -> int | None:
        return None  # device_peak_bytes / process RSS: process-wide, filled in by the caller

    def close(self) -> None:
        self.state = self.batch = self.compiled = self.metrics = None


@dataclasses.dataclass
class Entry:
    """One thing to time: a runner (prepare, step, close) and what its step should cost."""

    name: str
    spec: str  # config spec or a description
    kind: str  # ours | torch_eager | torch_compiled
    runner: Any
    flops: float  # analytic train-step FLOPs (models/flops.py)
    flops_basis: str  # OURS (B*P MLM positions) or DENSE (all B*T positions)
    mlm_predictions: int  # positions the MLM head scores per step
    num_params: int
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    times: list[float] = dataclasses.field(default_factory=list)
    first_entry_times: list[float] = dataclasses.field(default_factory=list)  # paired rounds
    peaks: list[float] = dataclasses.field(default_factory=list)  # CPU: per-round matmul rate


def count_params(params: Any) -> int:
    return int(sum(x.size for x in jax.tree.leaves(params)))


def our_step(cfg: ModelConfig, opt_cfg: ml_collections.ConfigDict, shapes: Shapes,
             batch: dict[str, np.ndarray], seed: int, dense: bool,
             device_masking: bool = False, dropout_prng: str | None = None,
             ) -> tuple[Any, Callable[[jax.Array], Any], Any]:
    """(jitted step with donated state, init_state(rng), the host batch it is fed).
    `dropout_prng`: the config's (configs/pretrain.py); None: training/steps.py's default."""
    model = BertForMaskedLM(cfg)
    optimizer, schedule = make_optimizer(opt_cfg, schedule_steps(opt_cfg))

    def init_state(rng: jax.Array) -> dict[str, Any]:
        ids = jnp.zeros((1, shapes.seq_len), jnp.int32)
        positions = jnp.zeros((1, shapes.predictions), jnp.int32)
        params = nn.unbox(model.init(rng, ids, ids, ids, positions)["params"])
        return {"step": jnp.zeros((), jnp.int32), "params": params,
                "opt_state": optimizer.init(params)}

    masker, fed = None, our_batch(batch, dense)
    if device_masking:
        # The host's whole share: unmasked rows and one stream id per row.
        masker = DeviceMasker(SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4), cfg.vocab_size,
                              shapes.predictions)
        fed = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
        fed["mask_stream"] = np.stack([np.full(shapes.batch, seed), np.ones(shapes.batch),
                                       np.zeros(shapes.batch), np.arange(shapes.batch)],
                                      axis=1).astype(np.int32)
    prng = {} if dropout_prng is None else {"dropout_prng": dropout_prng}
    train_step = steps.make_train_step(model, optimizer, schedule, seed, masker=masker, **prng)
    return jax.jit(train_step, donate_argnums=(0,)), init_state, fed


def our_entry(name: str, spec: str, cfg: ModelConfig, opt_cfg: ml_collections.ConfigDict,
              shapes: Shapes, batch: dict[str, np.ndarray], seed: int, dense: bool,
              device_masking: bool = False, dropout_prng: str | None = None) -> Entry:
    """Ours, built: parameters, optimizer state and batch on the device (not compiled)."""
    step_fn, init_state, fed = our_step(cfg, opt_cfg, shapes, batch, seed, dense,
                                        device_masking, dropout_prng)
    state = jax.block_until_ready(jax.jit(init_state)(jax.random.key(seed)))
    predictions = shapes.tokens if dense else shapes.batch * shapes.predictions
    return Entry(
        name=name, spec=spec, kind="ours",
        runner=JaxRunner(step_fn, state, jax.block_until_ready(jax.device_put(fed))),
        flops=flop_count(cfg, shapes.seq_len).train_step(shapes.tokens, predictions),
        flops_basis=DENSE if dense else OURS, mlm_predictions=predictions,
        num_params=count_params(state["params"]),
        info={"model": cfg.to_dict(), "dropout_prng": dropout_prng or "default"},
    )


def compile_seconds(cfg: ModelConfig, opt_cfg: ml_collections.ConfigDict, shapes: Shapes,
                    seed: int = 0, dropout_prng: str | None = None) -> dict[str, float]:
    """Lowering and compiling our step for `cfg` from abstract shapes (no state is built):
    what a cold start pays before its first step (scripts/accelerator_check.py)."""
    batch = synthetic_batch(shapes, cfg.vocab_size, seed)
    step_fn, init_state, fed = our_step(cfg, opt_cfg, shapes, batch, seed, dense=False,
                                        dropout_prng=dropout_prng)
    state = jax.eval_shape(init_state, jax.random.key(seed))
    start = time.perf_counter()
    lowered = step_fn.lower(state, jax.tree.map(jnp.asarray, fed))
    lower_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile()
    out = {"lower_s": lower_s, "compile_s": time.perf_counter() - start}
    out.update(memory_analysis(compiled))
    return out


def import_torch_peer() -> Any:
    """scripts/torch_peer.py, imported only for --vs_torch/--torch_compile; one clear error
    where torch or transformers is missing."""
    try:
        from scripts import torch_peer
    except Exception as e:  # ImportError, or a CUDA library torch cannot load (OSError)
        raise BenchmarkError(f"--vs_torch/--torch_compile need torch and transformers: "
                             f"{type(e).__name__}: {e}") from e
    return torch_peer


def check_torch_peer(cfg: ModelConfig) -> None:
    """Refuses a --config the PyTorch peer cannot stand beside (one line), before anything
    is built."""
    torch_peer = import_torch_peer()
    try:
        torch_peer.check_config(cfg)
    except torch_peer.PeerError as e:
        raise BenchmarkError(str(e)) from e


def torch_entry(cfg: ModelConfig, opt_cfg: ml_collections.ConfigDict, shapes: Shapes,
                batch: dict[str, np.ndarray], seed: int, compile: bool) -> Entry:
    """transformers' PyTorch BertForMaskedLM (scripts/torch_peer.py), built on the GPU
    when torch sees one. Its head scores all B*T positions: dense-head FLOPs."""
    torch_peer = import_torch_peer()
    ours = jax.devices()[0].platform
    if ours != "cpu" and torch_peer.default_device().type == "cpu":
        raise BenchmarkError(f"torch sees no CUDA device while JAX runs on {ours}: the peer "
                             "would time the CPU")
    peer = torch_peer.TorchPeer(cfg, opt_cfg, batch, seed, compile=compile,
                                total_steps=schedule_steps(opt_cfg))
    mode = "torch.compile" if compile else "eager"
    return Entry(
        name=TORCH_COMPILED if compile else TORCH_EAGER,
        spec=f"transformers {peer.info()['transformers']} BertForMaskedLM, torch "
             f"{peer.info()['torch']} {mode}",
        kind=TORCH_COMPILED if compile else TORCH_EAGER, runner=TorchRunner(peer),
        # Its head scores every position; it has no pooler (ours: a rounding error here).
        flops=flop_count(cfg, shapes.seq_len).train_step(shapes.tokens, shapes.tokens),
        flops_basis=DENSE, mlm_predictions=shapes.tokens, num_params=peer.num_params,
        info=peer.info(),
    )


class TorchRunner:
    """The PyTorch peer behind the runner interface. Eager: `compile_s` is None and the
    first step is the warm-up's start; torch.compile: the first step compiles the forward
    and backward graphs, so its seconds are recorded as `compile_s` too."""

    def __init__(self, peer: Any):
        self.peer = peer

    def prepare(self, warmup: int) -> dict[str, Any]:
        first = self.step()
        info = {"first_step_s": first, "compile_s": first if self.peer.compiled else None,
                "compile_note": ("first step, torch.compile's tracing and Inductor compile "
                                 "included" if self.peer.compiled else "eager: nothing compiled"),
                "loss_first_step": self.peer.loss()}
        start = time.perf_counter()
        for _ in range(max(warmup - 1, 0)):
            self.step()
        info["warmup_s"] = first + time.perf_counter() - start
        return info

    def step(self) -> float:
        return self.peer.step()

    def loss(self) -> float:
        return self.peer.loss()

    def peak_memory_bytes(self) -> int | None:
        return self.peer.peak_memory_bytes()

    def close(self) -> None:
        self.peer.close()


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


def measure_cpu_peak() -> float:
    """hardware.py's matmul measurement (best of 3 fp32 2048^3), uncached: the load changes."""
    return hardware.measured_matmul_flops.__wrapped__(2048, 3)


# -- running, one entry at a time -------------------------------------------------------------
@dataclasses.dataclass
class Planned:
    """An entry not built yet: `build()` puts it on the device."""

    name: str
    spec: str
    kind: str  # ours | torch_eager | torch_compiled: budget estimates are per kind
    build: Callable[[], Entry]


@dataclasses.dataclass
class Run:
    """What one benchmark() call has so far: finished entries, skipped and failed ones."""

    shapes: Shapes
    num_steps: int
    warmup: int
    device: Any
    paired: bool
    measure_peak: Callable[[], float] | None
    deadline: float | None  # time.perf_counter() value; None: no --budget_s
    entries: list[Entry] = dataclasses.field(default_factory=list)
    skipped: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    failed: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def seconds_left(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.perf_counter()

    def estimate_s(self, kind: str) -> float | None:
        """The longest finished entry of this kind, else the longest finished entry; for
        the eager peer without one, the longest finished entry less its compile (eager
        compiles nothing)."""
        same = [e.info["total_s"] for e in self.entries if e.kind == kind]
        if same:
            return max(same)
        if kind == TORCH_EAGER:
            every = [e.info["total_s"] - (e.info.get("lower_s") or 0.0)
                     - (e.info.get("compile_s") or 0.0) for e in self.entries]
        else:
            every = [e.info["total_s"] for e in self.entries]
        return max(every) if every else None


def skip_reason(run: Run, planned: Planned) -> str | None:
    """Why `planned` is not started (None: it is), from the budget left."""
    left = run.seconds_left()
    if left == math.inf:
        return None
    if left <= 0:
        return f"--budget_s spent ({-left:.0f}s over) before it started"
    estimate = run.estimate_s(planned.kind)
    if estimate is not None and estimate > left:
        return (f"estimated {estimate:.0f}s (longest finished entry of its kind) "
                f"exceeds the {left:.0f}s left of --budget_s")
    return None


def time_steps(run: Run, entry: Entry, base: Entry | None) -> None:
    """`num_steps` timed steps of `entry`; with `base` (the first entry), each round runs
    one step of each, the order alternating, so a load change hits both alike. Stops
    early once the budget is spent (after at least 2 rounds)."""
    for round_index in range(run.num_steps):
        if run.seconds_left() <= 0 and round_index >= 2:
            entry.info["timed_steps_cut_by_budget"] = True
            break
        if base is None:
            entry.times.append(entry.runner.step())
        elif round_index % 2 == 0:
            entry.first_entry_times.append(base.runner.step())
            entry.times.append(entry.runner.step())
        else:
            entry.times.append(entry.runner.step())
            entry.first_entry_times.append(base.runner.step())
        if run.measure_peak is not None:
            entry.peaks.append(run.measure_peak())


def run_entry(run: Run, planned: Planned) -> Entry:
    """Builds, compiles, warms up and times one entry (the first stays built for pairing;
    the caller releases the others). Its seconds are in entry.info."""
    start = time.perf_counter()
    entry = planned.build()
    try:
        measure_entry(run, entry, start)
    except BaseException:
        entry.runner.close()  # an out-of-memory entry must not hold memory for the next
        raise
    return entry


def measure_entry(run: Run, entry: Entry, start: float) -> None:
    """run_entry's part after the build: compile, warm up, time, record."""
    entry.info["build_s"] = time.perf_counter() - start
    progress(f"{entry.name}: built in {entry.info['build_s']:.1f}s")
    entry.info.update(entry.runner.prepare(run.warmup))
    compiled = entry.info.get("compile_s")
    progress(f"{entry.name}: "
             + (f"lowered in {entry.info['lower_s']:.1f}s, " if "lower_s" in entry.info else "")
             + (f"compiled in {compiled:.1f}s, " if compiled is not None else "")
             + f"first step {entry.info['first_step_s']:.2f}s, "
             f"warm-up {entry.info['warmup_s']:.2f}s")
    base = run.entries[0] if run.entries and run.paired else None
    time_steps(run, entry, base)
    entry.info["loss_last_step"] = entry.runner.loss()
    own = entry.runner.peak_memory_bytes()
    if own is not None:
        entry.info["peak_memory_bytes"] = own
        entry.info["peak_memory_source"] = "torch.cuda.max_memory_allocated (this entry)"
    elif run.device.platform != "cpu" and entry.kind == "ours":
        entry.info["peak_memory_bytes"] = device_peak_bytes(run.device)
        entry.info["peak_memory_source"] = "jax peak_bytes_in_use (process-wide, monotone)"
    else:
        entry.info["peak_memory_bytes"] = process_peak_rss_bytes()
        entry.info["peak_memory_source"] = "process RSS high-water mark (monotone)"
    entry.info["total_s"] = time.perf_counter() - start
    median = statistics.median(entry.times)
    progress(f"{entry.name}: median step {median:.4f}s over {len(entry.times)} steps, "
             f"{run.shapes.tokens / median:.0f} tokens/s, loss {entry.info['loss_last_step']:.3f}; "
             f"{entry.info['total_s']:.1f}s in all")


def entry_peak(entry: Entry, peak: float) -> float:
    return statistics.median(entry.peaks) if entry.peaks else peak


def summarize(entries: list[Entry], shapes: Shapes, peak: float) -> list[dict[str, Any]]:
    """One JSON row per finished entry; ratios against the first entry, and against each
    torch peer's throughput (`throughput_vs_<peer>`)."""
    base = entries[0]
    base_median = statistics.median(base.times)
    rows = []
    for entry in entries:
        median = statistics.median(entry.times)
        peak_e = entry_peak(entry, peak)
        paired = ([t / b for t, b in zip(entry.times, entry.first_entry_times, strict=True)]
                  if entry.first_entry_times else [])
        rows.append({
            "name": entry.name,
            "spec": entry.spec,
            "kind": entry.kind,
            "num_params": entry.num_params,
            "mlm_predictions_per_step": entry.mlm_predictions,
            "mlm_head": ("sparse: logits at the B*P masked positions"
                         if entry.flops_basis == OURS else "dense: logits at all B*T positions"),
            "step_time_median_s": median,
            "step_time_min_s": min(entry.times),
            "step_time_max_s": max(entry.times),
            "step_time_mean_s": statistics.fmean(entry.times),
            "step_times_s": entry.times,
            "timed_steps": len(entry.times),
            "tokens_per_s": shapes.tokens / median,
            "flops_per_step": entry.flops,
            "flops_basis": ("models/flops.py train_step(B*T, B*P): sparse head"
                            if entry.flops_basis == OURS else
                            "models/flops.py train_step(B*T, B*T): dense head, all positions"),
            "achieved_flops_per_s": entry.flops / median,
            "peak_flops_per_s": peak_e,
            "mfu": entry.flops / median / peak_e,
            "peak_flops_per_round": entry.peaks,
            # Ratios against the first entry; paired = median over rounds of the per-round ratio.
            "step_time_ratio": median / base_median,
            "throughput_ratio": base_median / median,
            "paired_step_time_ratio": statistics.median(paired) if paired else 1.0,
            "first_entry_step_times_s": entry.first_entry_times,
            **entry.info,
        })
    for peer in [r for r in rows if r["kind"] != "ours"]:
        for row in rows:
            row[f"throughput_vs_{peer['name']}"] = (peer["step_time_median_s"]
                                                   / row["step_time_median_s"])
    return rows


def vs_torch_ratios(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """{peer: {entry: entry's throughput / peer's}} (> 1: the entry is faster), by medians
    and through the first entry's paired ratios (the peer's over the entry's)."""
    by_medians: dict[str, Any] = {}
    paired: dict[str, Any] = {}
    for peer in [r for r in rows if r["kind"] != "ours"]:
        by_medians[peer["name"]] = {r["name"]: r[f"throughput_vs_{peer['name']}"] for r in rows
                                    if r is not peer}
        paired[peer["name"]] = {r["name"]: peer["paired_step_time_ratio"]
                                / r["paired_step_time_ratio"] for r in rows if r is not peer}
    return by_medians, paired


def finite(value: Any) -> Any:
    """NaN and infinities as None: the JSON stays strict (common/files.py)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def markdown_table(result: dict[str, Any]) -> str:
    """One row per finished entry; ratios are against the first row, from the same process."""
    peers = [r["name"] for r in result["entries"] if r["kind"] != "ours"]
    lines = [
        f"batch {result['batch']} x seq_len {result['seq_len']}, {result['predictions']} MLM "
        f"targets per sequence, {result['steps']} timed steps after {result['warmup']} warm-up, "
        f"device {result['device']}, peak {result['peak_flops_per_s'] / 1e9:.1f} GFLOP/s "
        f"({result['peak_flops_source']}); 1-min load average "
        f"{result['load_average_1min']['start']:.1f} at start, "
        f"{result['load_average_1min']['end']:.1f} at end",
        "",
        "| entry | MLM logits at | build (s) | lower+compile (s) | median step (s) | min-max (s) "
        "| tokens/s | step time vs first (paired) | GFLOP/step | MFU | XLA plan (GiB) "
        "| peak (GiB) |" + "".join(f" throughput vs {p} |" for p in peers),
        "|---" * (12 + len(peers)) + "|",
    ]
    for r in result["entries"]:
        memory = r.get("memory", {}).get("compiled_bytes")
        peak = r.get("peak_memory_bytes")
        if r["kind"] == "ours":
            compile_cell = f"{r.get('lower_s', 0) + r.get('compile_s', 0):.1f}"
        else:
            compile_cell = "-" if r.get("compile_s") is None else f"{r['compile_s']:.1f} (1st step)"
        where = (f"B*P={r['mlm_predictions_per_step']} (sparse head)" if r["flops_basis"].endswith(
            "sparse head") else f"B*T={r['mlm_predictions_per_step']} (all positions)")
        lines.append(
            f"| {r['name']} | {where} | {r['build_s']:.1f} | {compile_cell} | "
            f"{r['step_time_median_s']:.4f} | "
            f"{r['step_time_min_s']:.4f}-{r['step_time_max_s']:.4f} | {r['tokens_per_s']:.0f} | "
            f"{r['step_time_ratio']:.3f} ({r['paired_step_time_ratio']:.3f}) | "
            f"{r['flops_per_step'] / 1e9:.4g} | {100 * r['mfu']:.1f}% | "
            f"{'-' if memory is None else f'{memory / 2**30:.2f}'} | "
            f"{'-' if peak is None else f'{peak / 2**30:.2f}'} |"
            + "".join(f" {r[f'throughput_vs_{p}']:.3f} |" for p in peers))
    notes = ["", "MLM logits at: `ours` scores only the B*P masked positions (the sparse head); "
             "`ours_dense_mlm` and transformers' BertForMaskedLM (torch_*) score all B*T "
             "positions, and their MFU counts those dense-head FLOPs. Peak: torch rows "
             "torch.cuda.max_memory_allocated on CUDA; ours the process-wide device peak "
             "(GPU/TPU) or process RSS (CPU), monotone over the run."]
    notes += [f"- skipped {s['name']}: {s['reason']}" for s in result["skipped"]]
    notes += [f"- failed {f['name']}: {f['error']}" for f in result["failed"]]
    return "\n".join(lines + notes)


def planned_entries(specs: list[str], names: list[str], configs: list[Any],
                    model_cfgs: list[ModelConfig], shapes: Shapes, data: dict[str, np.ndarray],
                    seed: int, *, vs_torch: bool, torch_compile: bool, device_masking: bool,
                    dense_mlm: bool, order: list[str] | None = None) -> list[Planned]:
    """The entries in the order they run (see the module docstring); `order` names
    entries to run first, in that order, right after the first entry (which stays first:
    it is every ratio's baseline)."""
    first_cfg, first_opt = model_cfgs[0], optimizer_config(configs[0])
    first_prng = configs[0].get("dropout_prng")  # configs/model.py has none: the default
    plan = [Planned(names[0], specs[0], "ours", lambda: our_entry(
        names[0], specs[0], first_cfg, first_opt, shapes, data, seed, False,
        dropout_prng=first_prng))]
    for compiled in [False] * vs_torch + [True] * torch_compile:
        plan.append(Planned(TORCH_COMPILED if compiled else TORCH_EAGER,
                            "transformers BertForMaskedLM", TORCH_COMPILED if compiled
                            else TORCH_EAGER, lambda c=compiled: torch_entry(
                                first_cfg, first_opt, shapes, data, seed, c)))
    for name, spec, cfg, c in zip(names[1:], specs[1:], model_cfgs[1:], configs[1:], strict=True):
        plan.append(Planned(name, spec, "ours", lambda n=name, s=spec, m=cfg, c=c: our_entry(
            n, s, m, optimizer_config(c), shapes, data, seed, False,
            dropout_prng=c.get("dropout_prng"))))
    if device_masking:
        plan.append(Planned("ours_device_masking", specs[0], "ours", lambda: our_entry(
            "ours_device_masking", specs[0], first_cfg, first_opt, shapes, data, seed, False,
            device_masking=True, dropout_prng=first_prng)))
    if dense_mlm:
        plan.append(Planned("ours_dense_mlm", specs[0], "ours", lambda: our_entry(
            "ours_dense_mlm", specs[0], first_cfg, first_opt, shapes, data, seed, True,
            dropout_prng=first_prng)))
    if order:
        unknown = sorted(set(order) - {p.name for p in plan})
        if unknown:
            raise BenchmarkError(f"order names no planned entry: {unknown}")
        rank = {name: i for i, name in enumerate(order)}
        plan[1:] = sorted(plan[1:], key=lambda p: rank.get(p.name, len(order)))
    return plan


# -- entry point ---------------------------------------------------------------------------------
def benchmark(config: str, compare: list[str] = (), *, batch: int | None = None,
              seq_len: int | None = None, predictions: int | None = None, num_steps: int = 10,
              warmup: int = 3, dense_mlm: bool = False, device_masking: bool = False,
              vs_torch: bool = False, torch_compile: bool = False,
              peak_flops: float | None = None, seed: int = 0, paired: bool = True,
              budget_s: float | None = None, json_path: str | None = None,
              markdown_path: str | None = None, header: dict[str, Any] | None = None,
              order: list[str] | None = None) -> dict[str, Any]:
    """Runs the entries one at a time (module docstring) and returns the JSON-ready
    result; --json/--markdown are rewritten after every entry. `order`: entry names
    to run first after the first entry (planned_entries), for a caller whose budget
    may not reach the end."""
    start = time.perf_counter()
    if num_steps <= 0 or warmup < 0:
        raise BenchmarkError(f"--steps={num_steps} must be > 0 and --warmup={warmup} >= 0")
    if budget_s is not None and budget_s <= 0:
        raise BenchmarkError(f"--budget_s={budget_s} must be > 0")
    compare = list(compare)
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
    # JAX's backend first, then torch: each loads its CUDA libraries (cuDNN, ...) once
    # per process, and JAX refuses an older cuDNN than it was built with.
    device = jax.devices()[0]
    if vs_torch or torch_compile:
        check_torch_peer(model_cfgs[0])  # refuse before anything is built
    data = synthetic_batch(shapes, model_cfgs[0].vocab_size, seed)
    load_before = os.getloadavg()  # other processes' CPU demand shows in the times

    if peak_flops:
        peak, source = peak_flops, "--peak_flops"
    elif device.platform == "cpu":
        peak, source = None, ("median of a 2048^3 fp32 matmul measured once per round between "
                              "the steps (same load as the steps)")
    else:
        peak, source = hardware.peak_flops_per_device(device), f"{device.device_kind} bf16 peak"
    run = Run(shapes=shapes, num_steps=num_steps, warmup=warmup, device=device, paired=paired,
              measure_peak=measure_cpu_peak if peak is None else None,
              deadline=None if budget_s is None else start + budget_s)
    names = ["ours"] + [f"ours[{extra}]" for extra in compare]
    plan = planned_entries(specs, names, configs, model_cfgs, shapes, data, seed,
                           vs_torch=vs_torch, torch_compile=torch_compile,
                           device_masking=device_masking, dense_mlm=dense_mlm, order=order)

    def result() -> dict[str, Any]:
        all_peaks = [p for e in run.entries for p in e.peaks]
        used_peak = peak if peak is not None else (statistics.median(all_peaks) if all_peaks
                                                   else math.nan)
        out: dict[str, Any] = {
            **(header or {}),
            "batch": shapes.batch, "seq_len": shapes.seq_len, "predictions": shapes.predictions,
            "tokens_per_step": shapes.tokens, "steps": num_steps, "warmup": warmup,
            "paired": paired, "budget_s": budget_s,
            "device": f"{device.platform}:{device.device_kind}", "cpu_count": os.cpu_count(),
            "jax": jax.__version__, "peak_flops_per_s": used_peak, "peak_flops_source": source,
            "load_average_1min": {"start": load_before[0], "end": os.getloadavg()[0]},
            "process_peak_rss_bytes": process_peak_rss_bytes(),
            "device_peak_bytes": device_peak_bytes(device),
            "planned": [p.name for p in plan],
            "entries": summarize(run.entries, shapes, used_peak) if run.entries else [],
            "skipped": run.skipped, "failed": run.failed,
            "seconds": time.perf_counter() - start,
        }
        out["vs_torch"], out["vs_torch_paired"] = vs_torch_ratios(out["entries"])
        return finite(out)

    def write() -> dict[str, Any]:
        current = result()
        if json_path:
            write_json_atomic(json_path, current)
        if markdown_path and current["entries"]:
            write_text_atomic(markdown_path, markdown_table(current) + "\n")
        return current

    write()
    for planned in plan:
        reason = skip_reason(run, planned) if run.entries else None
        if reason is not None:
            progress(f"{planned.name}: skipped: {reason}")
            run.skipped.append({"name": planned.name, "spec": planned.spec, "reason": reason})
            write()
            continue
        try:
            entry = run_entry(run, planned)
        except Exception as e:  # noqa: BLE001 - recorded; the other entries still run
            if not run.entries:
                raise
            traceback.print_exc()
            progress(f"{planned.name}: failed: {type(e).__name__}: {e}")
            run.failed.append({"name": planned.name, "spec": planned.spec,
                               "error": f"{type(e).__name__}: {e}"[:2000]})
            write()
            continue
        run.entries.append(entry)
        if len(run.entries) > 1 or not paired:
            entry.runner.close()  # the first entry stays built for the paired rounds
        write()
    if run.entries:
        run.entries[0].runner.close()
    return write()


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if FLAGS.vs_torch or FLAGS.torch_compile:
        # JAX takes 75% of a GPU's memory at its start by default; the peer needs its share.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    cache = compile_cache.enable(FLAGS.jax_cache)
    progress(compile_cache.describe(cache))
    try:
        result = benchmark(
            FLAGS.config, FLAGS.compare, batch=FLAGS.batch, seq_len=FLAGS.seq_len,
            predictions=FLAGS.predictions, num_steps=FLAGS.steps, warmup=FLAGS.warmup,
            dense_mlm=FLAGS.dense_mlm, device_masking=FLAGS.device_masking,
            vs_torch=FLAGS.vs_torch, torch_compile=FLAGS.torch_compile,
            peak_flops=FLAGS.peak_flops, seed=FLAGS.seed, paired=FLAGS.paired,
            budget_s=FLAGS.budget_s, json_path=FLAGS.json, markdown_path=FLAGS.markdown,
            header={"jax_cache": cache})
    except (BenchmarkError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(markdown_table(result) if result["entries"] else "no entry finished")
    for peer, ratios in result["vs_torch"].items():
        for name, ratio in ratios.items():
            print(f"{name} vs {peer}: {ratio:.3f}x throughput (paired through the first "
                  f"entry: {result['vs_torch_paired'][peer][name]:.3f}x)")


if __name__ == "__main__":
    define_flags()
    app.run(main)
