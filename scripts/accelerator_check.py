"""The checks that need an accelerator, in one run, each part written out as it finishes.

  bash scripts/accelerator_check.sh OUT_DIR          # on a GPU/TPU machine (the wrapper
                                                      # installs carried wheels first)
  python scripts/accelerator_check.py --quick --out /tmp/check   # tiny shapes, any CPU

Parts, in this order (the quick correctness checks first, then the speed numbers):

1. fused_parity: jax.nn.dot_product_attention (cuDNN flash attention on GPU) against
   the written-out path, outputs and gradients, at BERT-base's attention shape (12
   heads of 64, sequence 128, and a key size 128 != value size 64).
2. bf16_agreement: the MLM loss of BERT-base in bf16 and fp32, same parameters and batch.
3. speed: scripts/benchmark.py at base / seq 128 / bf16 / batch 256, one entry at a
   time within the part's budget, the targets' entries first: ours (multi-head,
   impl=fused, attention_dropout=0, the sparse MLM head), transformers' PyTorch
   BertForMaskedLM under torch.compile (scripts/torch_peer.py: SDPA, bf16 autocast,
   fused AdamW; its head scores all positions), talking heads (impl=einsum: talking
   heads cannot use the fused kernel, which has no hook between the logits and the
   softmax), the peer eager (cheap: nothing to compile), ours with the dense head (like
   for like with the peer), key_size=128. What does not fit is skipped and recorded.
   OUT/speed.json and OUT/speed.md are rewritten after every entry.
4. compile_scan: lowering and compiling BERT-base's step with the layers scanned
   (model.scan_layers, `scan=true`, first: expected cheaper) and unrolled
   (`scan=false`), the persistent cache off. A config without the `scan` arg records
   an error for that variant.
5. prng: the dropout PRNG's cost (config.dropout_prng) through scripts/prng_cost.py's
   measure(), one choice at a time at the speed part's shape (rbg, threefry_gpu_kernel,
   unsafe_rbg, off; threefry is the speed part's `ours`), compile seconds and step
   time; `pending` where scripts/prng_cost.py cannot be imported.
6. talking_heads_memory: talking heads full vs chunked (scripts/attention_memory.py),
   XLA's compiled plan by length.

Budget: --budget_s (300) bounds the run from the process's start. Each part has a
share (SHARES); a part may use what is left minus the shares of the parts after it,
so seconds an early part does not use roll on to the next. Parts that loop (speed,
compile_scan, prng, talking_heads_memory) skip what is estimated not to fit; before
their first compile the estimate is the speed part's cold compile of `ours`. The report
(OUT/check.json, OUT/check.md) is rewritten after every part, so a run cut short
keeps every finished part; a part that raises is recorded as an error and the rest
still run. The persistent compilation cache lives in --jax_cache (under /tmp, not
OUT: the device tool brings back at most 8 files), empty on a fresh machine.

Targets (docs/PERFORMANCE.md), judged on the accelerator only (--quick records the
values and judges nothing): ours' tokens/s >= 1.2x the torch.compile'd peer's; MFU
>= 0.45; talking heads' step time <= 1.15x multi-head's (paired, against `ours`);
lowering + compiling <= 15 s per entry from a cold cache.
"""

from __future__ import annotations

import time

START = time.perf_counter()  # the budget counts the imports too

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


import attention  # noqa: E402
from common import compile_cache  # noqa: E402
from common.files import write_json_atomic, write_text_atomic  # noqa: E402
from configs import model as model_configs  # noqa: E402
from models import BertForMaskedLM, ModelConfig  # noqa: E402
from scripts import attention_memory, benchmark  # noqa: E402
from training import hardware  # noqa: E402

FLAGS = flags.FLAGS
DEFAULT_CACHE = "/tmp/accelerator_check_jax_cache"

# Seconds per part on the accelerator (sum: the default --budget_s). A cold BERT-base
# step compiles in ~15-40 s on an H200; the speed part's entries each cost about one
# compile (the torch.compile'd peer more).
SHARES = {"fused_parity": 15, "bf16_agreement": 20, "speed": 150, "compile_scan": 50,
          "prng": 35, "talking_heads_memory": 30}

# The dropout PRNGs the prng part measures, most wanted first (threefry, the default,
# is the speed part's `ours`); those scripts/prng_cost.py's default_choices() does not
# offer on this backend (threefry_gpu_kernel off GPU) are left out.
PRNG_CHOICES = ("rbg", "threefry_gpu_kernel", "unsafe_rbg", "off")
PRNG_CHOICES_QUICK = ("rbg",)

# --quick: a 128-word vocabulary (BERT's 30,522 makes the embedding and head most of a
# micro model's compile and step).
QUICK_VOCAB = {True: ",vocab=128", False: ""}

TARGETS = {"vs_torch_compiled": 1.2, "mfu": 0.45, "talking_heads_step_ratio": 1.15,
           "compile_s": 15.0}


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    flags.DEFINE_string("out", "accelerator_check",
                        "directory for check.json, check.md, speed.json, speed.md")
    flags.DEFINE_bool("quick", False, "tiny shapes and few steps (a CPU smoke run)")
    flags.DEFINE_float("budget_s", sum(SHARES.values()),
                       "seconds for the whole run, imports included (parts share it)")
    flags.DEFINE_string("jax_cache", DEFAULT_CACHE,
                        "persistent compilation cache folder (none: off)")


class Context:
    """What a part gets: the mode, its seconds, the output folder, the cache setting, and
    the parts finished before it."""

    def __init__(self, quick: bool, out: str, cache_setting: str, budget_s: float,
                 report: dict[str, Any]):
        self.quick, self.out, self.cache_setting = quick, out, cache_setting
        self.budget_s = budget_s
        self.start = time.perf_counter()
        self.report = report

    def seconds_left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)


def model_config(arg: str) -> ModelConfig:
    return ModelConfig.from_config(model_configs.get_config(arg).model)


# -- 1, 2: correctness ---------------------------------------------------------------------------
def fused_parity(ctx: Context) -> dict[str, Any]:
    """Max |fused - einsum| of attention outputs and gradients, per key/value size."""
    size, length, batch = ("micro", 16, 2) if ctx.quick else ("base", 128, 4)
    out = {}
    for key_size in (None, 128):
        extra = "" if key_size is None else f",key_size={key_size}"
        einsum = model_config(f"size={size},attention_dropout=0{extra}{QUICK_VOCAB[ctx.quick]}")
        fused = einsum.replace(attention_impl="fused")
        x = jax.random.normal(jax.random.key(0), (batch, length, einsum.hidden_size))
        mask = jnp.ones((batch, length), bool).at[0, length // 2:].set(False)
        module = attention.get("multi_head")(einsum)
        params = module.init(jax.random.key(1), x, mask, True)["params"]

        def loss(cfg, p, x=x, mask=mask):
            return jnp.sum(jnp.sin(attention.get("multi_head")(cfg).apply({"params": p}, x,
                                                                          mask, True)))

        results = {name: jax.jit(jax.value_and_grad(lambda p, cfg=cfg: loss(cfg, p)))(params)
                   for name, cfg in (("einsum", einsum), ("fused", fused))}
        (v_e, g_e), (v_f, g_f) = results["einsum"], results["fused"]
        grad_diff = max(float(jnp.max(jnp.abs(a - b)))
                        for a, b in zip(jax.tree.leaves(g_e), jax.tree.leaves(g_f), strict=True))
        out[f"key_size={key_size or 'D/N'}"] = {
            "loss_rel_diff": float(abs(v_e - v_f) / abs(v_e)), "max_grad_abs_diff": grad_diff}
    # Default matmul precision on GPU is TF32-like for fp32: a loose but meaningful bound.
    out["pass"] = all(v["loss_rel_diff"] < 1e-3 for v in out.values() if isinstance(v, dict))
    return out


def bf16_agreement(ctx: Context) -> dict[str, Any]:
    size, batch, length = ("micro", 4, 32) if ctx.quick else ("base", 16, 128)
    losses = {}
    params = None
    for dtype in ("float32", "bfloat16"):
        cfg = model_config(f"size={size},dtype={dtype},dropout=0,attention_dropout=0"
                           f"{QUICK_VOCAB[ctx.quick]}")
        model = BertForMaskedLM(cfg)
        rng = np.random.default_rng(0)
        ids = jnp.asarray(rng.integers(5, cfg.vocab_size, (batch, length)), jnp.int32)
        positions = jnp.asarray(np.sort(rng.choice(length, (batch, 20 if not ctx.quick else 4)),
                                        axis=1), jnp.int32)
        targets = jnp.asarray(rng.integers(5, cfg.vocab_size, positions.shape), jnp.int32)
        if params is None:  # the same fp32 parameters for both dtypes
            params = model.init(jax.random.key(0), ids, jnp.zeros_like(ids),
                                jnp.ones_like(ids), positions)["params"]

        def loss(p, model=model, ids=ids, positions=positions, targets=targets):
            logits = model.apply({"params": p}, ids, jnp.zeros_like(ids), jnp.ones_like(ids),
                                 positions)["mlm_logits"]
            logp = jax.nn.log_softmax(logits.astype(jnp.float32))
            return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], -1))

        losses[dtype] = float(jax.jit(loss)(params))
    rel = abs(losses["bfloat16"] - losses["float32"]) / abs(losses["float32"])
    return {"loss_fp32": losses["float32"], "loss_bf16": losses["bfloat16"],
            "rel_diff": rel, "pass": rel < 1e-2}


# -- 3: speed ----------------------------------------------------------------------------------
def speed_shape(quick: bool) -> dict[str, Any]:
    """The speed part's config and shapes (compile_scan and prng reuse them)."""
    size = "micro" if quick else "base"
    # Scanned layers: one layer to compile (the unrolled step is an entry of its own).
    return {"config": f"configs/pretrain.py:size={size},dtype=bfloat16,impl=fused,"
                      f"attention_dropout=0,scan=true{QUICK_VOCAB[quick]}",
            "batch": 4 if quick else 256, "seq_len": 32 if quick else 128,
            "predictions": 4 if quick else 20}


TALKING_HEADS = "attention=talking_heads,impl=einsum"
KEY_SIZE = "key_size=128"
UNROLLED = "scan=false"  # the layers unrolled: step time and compile against scanned


def speed(ctx: Context) -> dict[str, Any]:
    shape = speed_shape(ctx.quick)
    talking = f"ours[{TALKING_HEADS}]"
    try:  # without torch (or with a torch that cannot load), ours' entries still run
        benchmark.import_torch_peer()
        peer_problem = None
    except benchmark.BenchmarkError as e:
        peer_problem = str(e)
    peers = peer_problem is None
    # torch.compile (Inductor's C++ path) takes ~35 s for a one-layer model on this
    # repository's 2-core CPU: the quick run leaves it out (the report says so).
    compiled_peer = peers and not ctx.quick
    # The targets' entries first: the budget may not reach the end.
    order = [benchmark.TORCH_COMPILED] * compiled_peer + [talking, f"ours[{UNROLLED}]"] + [
        benchmark.TORCH_EAGER] * peers + ["ours_dense_mlm", f"ours[{KEY_SIZE}]"]
    result = benchmark.benchmark(
        shape["config"], [TALKING_HEADS, UNROLLED, KEY_SIZE], batch=shape["batch"],
        seq_len=shape["seq_len"], predictions=shape["predictions"],
        num_steps=3 if ctx.quick else 20, warmup=1 if ctx.quick else 3, dense_mlm=True,
        vs_torch=peers, torch_compile=compiled_peer,
        # On CPU: the matmul peak measured once, not once per round.
        peak_flops=hardware.peak_flops_per_device() if ctx.quick else None,
        budget_s=max(ctx.seconds_left(), 1.0),
        json_path=os.path.join(ctx.out, "speed.json"),
        markdown_path=os.path.join(ctx.out, "speed.md"),
        header={"jax_cache": ctx.cache_setting}, order=order)
    entries = {e["name"]: e for e in result["entries"]}

    def get(name: str, key: str) -> Any:
        return entries[name].get(key) if name in entries else None

    out: dict[str, Any] = {
        "device": result["device"], "peak_flops_per_s": result["peak_flops_per_s"],
        "batch": shape["batch"], "seq_len": shape["seq_len"],
        "tokens_per_s": {name: e["tokens_per_s"] for name, e in entries.items()},
        "step_time_median_s": {name: e["step_time_median_s"] for name, e in entries.items()},
        "mfu": {name: e["mfu"] for name, e in entries.items()},
        "lower_plus_compile_s": {name: e["lower_s"] + e["compile_s"]
                                 for name, e in entries.items() if e["kind"] == "ours"},
        "torch_compile_first_step_s": get(benchmark.TORCH_COMPILED, "compile_s"),
        "ours_vs_torch_compiled": get("ours", "throughput_vs_torch_compiled"),
        "ours_vs_torch_eager": get("ours", "throughput_vs_torch_eager"),
        "ours_dense_vs_torch_compiled": get("ours_dense_mlm", "throughput_vs_torch_compiled"),
        "talking_heads_step_ratio_paired": get(talking, "paired_step_time_ratio"),
        # > 1: the unrolled step is slower than the scanned one (model.scan_layers' default)
        "unrolled_step_ratio_paired": get(f"ours[{UNROLLED}]", "paired_step_time_ratio"),
        "talking_heads_step_ratio_medians": get(talking, "step_time_ratio"),
        "loss_first_step": {name: e.get("loss_first_step") for name, e in entries.items()},
        "skipped": result["skipped"], "failed": result["failed"],
        "entries": result["entries"],
        "table": benchmark.markdown_table(result) if result["entries"] else "",
    }
    if peer_problem is not None:
        out["skipped"] = out["skipped"] + [
            {"name": name, "reason": peer_problem}
            for name in (benchmark.TORCH_COMPILED, benchmark.TORCH_EAGER)]
    elif ctx.quick:
        out["skipped"] = out["skipped"] + [{
            "name": benchmark.TORCH_COMPILED,
            "reason": "--quick: torch.compile on a CPU takes ~35 s for a one-layer model"}]
    out["pass"] = judge(out, ctx.quick, ("vs_torch_compiled", "mfu", "talking_heads", "compile"))
    return out


def cold_compile_prior(ctx: Context) -> float | None:
    """Seconds one cold BERT-base step costs before it runs, from the speed part's `ours`
    (build, lower, compile), else its slowest other entry of ours: the estimate for a
    later part's first compile."""
    entries = [e for e in ctx.report["parts"].get("speed", {}).get("entries") or []
               if e["name"].startswith("ours")]
    if not entries:
        return None
    costs = {e["name"]: sum(e.get(k) or 0.0 for k in ("build_s", "lower_s", "compile_s"))
             for e in entries}
    return costs.get("ours", max(costs.values()))


# -- 4: compile time, scanned vs unrolled --------------------------------------------------------
def compile_scan(ctx: Context) -> dict[str, Any]:
    """Cold lowering + compile seconds of our step with scan=true and scan=false, at the
    speed part's shape, with the persistent cache off. The unrolled step is the speed
    part's `ours` (same program, compiled there from an empty cache, which is the fully
    cold figure): it is taken from there, and compiled again here only without it. The
    in-process autotuning results of the speed part's compiles stay warm here."""
    shape = speed_shape(ctx.quick)
    shapes = benchmark.Shapes(shape["batch"], shape["seq_len"], shape["predictions"])
    variants: dict[str, Any] = {}
    longest = cold_compile_prior(ctx)
    entries = ctx.report["parts"].get("speed", {}).get("entries") or []
    # The speed part's `ours` (scanned) and `ours[scan=false]`, compiled there from an
    # empty cache: the same programs, so their figures are taken, not compiled again.
    measured = {bool(e.get("model", {}).get("scan_layers", False)): e for e in entries
                if e["name"] in ("ours", f"ours[{UNROLLED}]")}
    for scan in ("true", "false"):
        name = f"scan={scan}"
        if (scan == "true") in measured:
            e = measured[scan == "true"]
            variants[name] = {"lower_s": e["lower_s"], "compile_s": e["compile_s"],
                              "from": f"the speed part's {e['name']} (the same program)",
                              "scan_layers": scan == "true"}
            continue
        spec = f"{shape['config']},{name}"
        try:
            config = benchmark.load_config(spec)
            cfg = ModelConfig.from_config(config.model)
        except Exception as e:  # noqa: BLE001 - the arg may not exist yet: record it
            variants[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
            continue
        left = ctx.seconds_left()
        if longest is not None and longest > left:
            variants[name] = {"skipped": f"estimated {longest:.0f}s exceeds the {left:.0f}s left"}
            continue
        start = time.perf_counter()
        try:
            with compile_cache.disabled():  # a compile, not a cache read
                got = benchmark.compile_seconds(cfg, benchmark.optimizer_config(config),
                                                shapes, dropout_prng=config.get("dropout_prng"))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            got = {"error": f"{type(e).__name__}: {e}"[:500]}
        got["scan_layers"] = getattr(cfg, "scan_layers", None)
        variants[name] = got
        seconds = time.perf_counter() - start
        longest = seconds if longest is None else max(longest, seconds)
        print(f"compile_scan {name}: {json.dumps(got, default=str)[:300]}", flush=True)
    timed = {k: v["lower_s"] + v["compile_s"] for k, v in variants.items() if "compile_s" in v}
    out: dict[str, Any] = {"variants": variants, "lower_plus_compile_s": timed}
    problems = {k: v.get("error") or v.get("skipped") for k, v in variants.items()
                if "compile_s" not in v}
    if problems:
        out["not_measured"] = problems
    if len(timed) == 2:
        out["unrolled_over_scanned"] = timed["scan=false"] / timed["scan=true"]
    out["pass"] = judge({"lower_plus_compile_s": timed}, ctx.quick, ("compile",))
    return out


# -- 5: the dropout PRNG --------------------------------------------------------------------------
def prng(ctx: Context) -> dict[str, Any]:
    """scripts/prng_cost.py's measure() per choice (cold compile, HLO counts, step time),
    against the speed part's `ours` (threefry)."""
    try:
        from scripts import prng_cost
    except ImportError as e:
        return {"pending": f"scripts/prng_cost.py cannot be imported: {e}", "pass": None}
    shape = speed_shape(ctx.quick)
    offered = set(prng_cost.default_choices())
    choices = [c for c in (PRNG_CHOICES_QUICK if ctx.quick else PRNG_CHOICES) if c in offered]
    rows: dict[str, Any] = {}
    skipped = []
    longest = cold_compile_prior(ctx)
    for choice in choices:
        left = ctx.seconds_left()
        if longest is not None and longest > left:
            skipped.append(f"{choice}: estimated {longest:.0f}s exceeds the {left:.0f}s left")
            continue
        start = time.perf_counter()
        [row] = prng_cost.measure(shape["config"], batch=shape["batch"],
                                  seq_len=shape["seq_len"], choices=[choice],
                                  steps=3 if ctx.quick else 10)
        rows[choice] = row
        seconds = time.perf_counter() - start
        longest = seconds if longest is None else max(longest, seconds)
    speed_part = ctx.report["parts"].get("speed", {})
    threefry_step = (speed_part.get("step_time_median_s") or {}).get("ours")
    return {
        "compile_s": {c: r.get("compile_s") for c, r in rows.items()},
        "step_s": {c: r.get("step_s") for c, r in rows.items()},
        "threefry_step_s (speed part's ours)": threefry_step,
        "step_vs_threefry": {c: r["step_s"] / threefry_step for c, r in rows.items()
                             if r.get("step_s") and threefry_step},
        "rows": rows, "skipped": skipped, "pass": None}


# -- 6: talking-heads memory ------------------------------------------------------------------
def talking_heads_memory(ctx: Context) -> dict[str, Any]:
    """XLA's plan for the gradient, full vs chunked, by length (compiled, not run)."""
    size, lengths = ("micro", (256,)) if ctx.quick else ("base", (2048, 4096))
    rows: list[dict[str, Any]] = []
    skipped = []
    prior = cold_compile_prior(ctx)  # a row compiles twice (full, chunked)
    longest = None if prior is None else 2 * prior
    for length in lengths:
        left = ctx.seconds_left()
        if longest is not None and longest > left:
            skipped.append(f"seq_len {length}: estimated {longest:.0f}s exceeds the "
                           f"{left:.0f}s left")
            continue
        start = time.perf_counter()
        row: dict[str, Any] = {"seq_len": length}
        for impl in ("full", "chunked"):
            # Scanned: one layer to compile; full and chunked alike, so the ratio holds.
            cfg = model_config(f"size={size},attention=talking_heads,th_impl={impl},"
                               f"th_chunk=128,max_len={length},dropout=0,attention_dropout=0,"
                               f"scan=true{QUICK_VOCAB[ctx.quick]}")
            row[impl] = attention_memory.compiled_bytes(cfg, length, 20)
        row["chunked_over_full"] = row["chunked"]["total_gib"] / row["full"]["total_gib"]
        rows.append(row)
        seconds = time.perf_counter() - start
        longest = seconds if longest is None else max(longest, seconds)
    # Target of docs/PERFORMANCE.md (d): chunked at most 25% of full at 2048 tokens.
    at_2048 = [r["chunked_over_full"] for r in rows if r["seq_len"] == 2048]
    return {"rows": rows, "skipped": skipped,
            "pass": (at_2048[0] <= 0.25 if at_2048 else None) if not ctx.quick else None}


PARTS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "fused_parity": fused_parity, "bf16_agreement": bf16_agreement, "speed": speed,
    "compile_scan": compile_scan, "prng": prng, "talking_heads_memory": talking_heads_memory}


# -- targets ---------------------------------------------------------------------------------
COMPILE_TARGET = "lower + compile seconds, worst entry, cold cache"


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """Each target of docs/PERFORMANCE.md: value, target and pass (None: not measured, or
    --quick)."""
    speed_part = report["parts"].get("speed", {})
    scan_part = report["parts"].get("compile_scan", {})
    compile_s = {**speed_part.get("lower_plus_compile_s", {}),
                 **{f"compile_scan {k}": v
                    for k, v in scan_part.get("lower_plus_compile_s", {}).items()}}
    rows = {
        "ours sparse-head tokens/s / torch.compile'd peer's": (
            speed_part.get("ours_vs_torch_compiled"), TARGETS["vs_torch_compiled"], ">="),
        "MFU of ours (sparse head; analytic FLOPs / bf16 peak)": (
            (speed_part.get("mfu") or {}).get("ours"), TARGETS["mfu"], ">="),
        "talking heads step time / multi-head's (paired, vs ours)": (
            speed_part.get("talking_heads_step_ratio_paired"),
            TARGETS["talking_heads_step_ratio"], "<="),
        COMPILE_TARGET: (
            max(compile_s.values()) if compile_s else None, TARGETS["compile_s"], "<="),
    }
    out = {}
    for name, (value, target, op) in rows.items():
        passed = None
        if value is not None and not report["quick"]:
            passed = value >= target if op == ">=" else value <= target
        out[name] = {"value": value, "target": f"{op} {target}", "pass": passed}
    out[COMPILE_TARGET]["per_entry"] = compile_s
    if report.get("jax_cache_files_at_start"):
        # A warm cache: the speed part's compiles were cache reads, not cold compiles.
        out[COMPILE_TARGET]["pass"] = None
        out[COMPILE_TARGET]["note"] = (f"the cache held {report['jax_cache_files_at_start']} "
                                       "files at the start: not a cold run")
    return out


def judge(part: dict[str, Any], quick: bool, which: tuple[str, ...]) -> bool | None:
    """A part's pass over its own targets: None in --quick or when nothing was measured."""
    if quick:
        return None
    checks = []
    if "vs_torch_compiled" in which and part.get("ours_vs_torch_compiled") is not None:
        checks.append(part["ours_vs_torch_compiled"] >= TARGETS["vs_torch_compiled"])
    if "mfu" in which and "ours" in part.get("mfu", {}):
        checks.append(part["mfu"]["ours"] >= TARGETS["mfu"])
    if "talking_heads" in which and part.get("talking_heads_step_ratio_paired") is not None:
        checks.append(part["talking_heads_step_ratio_paired"]
                      <= TARGETS["talking_heads_step_ratio"])
    if "compile" in which:
        checks += [s <= TARGETS["compile_s"]
                   for s in part.get("lower_plus_compile_s", {}).values()]
    return all(checks) if checks else None


# -- the report --------------------------------------------------------------------------------
def brief(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {brief(v)}" for k, v in value.items()) + "}"
    return str(value)


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Accelerator check ({report['device']}, jax {report['jax']}, "
             f"{report['date']}{', --quick' if report.get('quick') else ''})", "",
             "| check | seconds (budget) | result | pass |", "|---|---|---|---|"]
    for name, part in report["parts"].items():
        seconds = (f"{part.get('seconds', 0):.0f} ({part['budget_s']:.0f})"
                   if "budget_s" in part else "")
        if "error" in part:
            lines.append(f"| {name} | {seconds} | error: {part['error']} | no |")
            continue
        hidden = ("entries", "rows", "pass", "seconds", "budget_s", "skipped", "failed",
                  "table", "variants", "step_time_median_s", "mfu", "loss_first_step")
        shown = {k: v for k, v in part.items() if k not in hidden}
        for key in ("skipped", "failed"):
            if part.get(key):
                shown[key] = [s.get("name", s) if isinstance(s, dict) else s for s in part[key]]
        text = ", ".join(f"{k}={brief(v)}" for k, v in shown.items())
        lines.append(f"| {name} | {seconds} | {text} | {part.get('pass')} |")
    if report.get("targets"):
        lines += ["", "| target | value | wanted | pass |", "|---|---:|---|---|"]
        for name, t in report["targets"].items():
            note = f" ({t['note']})" if t.get("note") else ""
            lines.append(f"| {name} | {brief(t['value'])} | {t['target']} | {t['pass']}{note} |")
    speed_part = report["parts"].get("speed", {})
    if speed_part.get("table"):
        lines += ["", "## speed", "", speed_part["table"]]
    for skipped in speed_part.get("skipped", []):
        lines.append(f"- speed: skipped {skipped['name']}: {skipped['reason']}")
    memory = report["parts"].get("talking_heads_memory", {})
    if memory.get("rows"):
        lines += ["", "| seq len | full GiB | chunked GiB | chunked / full |",
                  "|---:|---:|---:|---:|"]
        lines += [f"| {r['seq_len']} | {r['full']['total_gib']:.2f} | "
                  f"{r['chunked']['total_gib']:.2f} | {r['chunked_over_full']:.2f} |"
                  for r in memory["rows"]]
    return "\n".join(lines) + "\n"


def write_report(out: str, report: dict[str, Any]) -> None:
    report["targets"] = targets(report)
    report["seconds"] = time.perf_counter() - START
    write_json_atomic(os.path.join(out, "check.json"), benchmark.finite(report))
    write_text_atomic(os.path.join(out, "check.md"), markdown(report))


def part_budget(name: str, budget_s: float) -> float:
    """What is left of the run's budget minus the shares of the parts after `name`."""
    later = list(SHARES)[list(SHARES).index(name) + 1:]
    left = budget_s - (time.perf_counter() - START)
    return left - sum(SHARES[p] for p in later)


def run(out: str, quick: bool, budget_s: float, cache_setting: str) -> dict[str, Any]:
    os.makedirs(out, exist_ok=True)
    device = jax.devices()[0]
    cached = (sum(len(files) for _, _, files in os.walk(cache_setting))
              if os.path.isdir(cache_setting) else 0)
    report: dict[str, Any] = {
        "device": f"{device.platform}:{device.device_kind}", "jax": jax.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": quick, "budget_s": budget_s,
        "jax_cache": cache_setting, "jax_cache_files_at_start": cached, "parts": {}}
    for name, check in PARTS.items():
        budget = part_budget(name, budget_s)
        if budget <= 0:
            report["parts"][name] = {"skipped": f"no time left ({budget:.0f}s)",
                                     "budget_s": budget, "seconds": 0.0, "pass": None}
            print(f"{name}: skipped, no time left", flush=True)
            write_report(out, report)
            continue
        start = time.perf_counter()
        print(f"{name}: starting, {budget:.0f}s budget, "
              f"{time.perf_counter() - START:.0f}s into the run", flush=True)
        try:
            part = check(Context(quick, out, cache_setting, budget, report))
        except Exception as e:  # noqa: BLE001 - record it, run the other parts
            traceback.print_exc()
            part = {"error": f"{type(e).__name__}: {e}"[:2000]}
        part["seconds"] = time.perf_counter() - start
        part["budget_s"] = budget
        report["parts"][name] = part
        shown = {k: v for k, v in part.items() if k not in ("entries", "rows")}
        print(f"{name}: {json.dumps(benchmark.finite(shown), default=str)[:600]}", flush=True)
        write_report(out, report)
    return report


def main(argv: list[str]) -> None:
    del argv
    # JAX takes 75% of a GPU's memory at its first use by default; the PyTorch peer of
    # the speed part needs its share (before any jax computation: jax reads it then).
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if FLAGS.quick and "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
        # A smoke run: compiling, not running, is its time; without LLVM's optimisation
        # passes the code is slower, the numbers the same (tests/conftest.py does this too).
        # XLA reads the variable when the backend starts, at the first jax.devices().
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_backend_optimization_level=0").strip()
    try:
        cache = compile_cache.enable(FLAGS.jax_cache)
    except Exception as e:  # noqa: BLE001 - a jax without one of its options: run uncached
        print(f"compilation cache not enabled: {type(e).__name__}: {e}", flush=True)
        cache = None
    print(compile_cache.describe(cache), flush=True)
    report = run(FLAGS.out, FLAGS.quick, FLAGS.budget_s, cache or "none")
    print(markdown(report))
    print(f"accelerator_check: {time.perf_counter() - START:.0f}s, budget {FLAGS.budget_s:.0f}s")


if __name__ == "__main__":
    define_flags()
    app.run(main)
