"""The checks that need an accelerator, in one run, written to one JSON + markdown.

  bash scripts/accelerator_check.sh OUT_DIR          # on a GPU/TPU machine (the wrapper
                                                      # installs carried wheels first)
  python scripts/accelerator_check.py --quick --out /tmp/check   # tiny shapes, any CPU

1. fused vs einsum: jax.nn.dot_product_attention (cuDNN flash attention on GPU)
   against the written-out path, outputs and gradients, at BERT-base's attention
   shape (12 heads of 64, sequence 128, and a key size 128 != value size 64).
2. bf16 vs fp32: the MLM loss of BERT-base with the same parameters and batch.
3. speed: scripts/benchmark.py at base/128 in bf16, fused attention, against the
   einsum path, plus masking inside the step (its share of the step), with MFU
   against the device's bf16 peak (training/hardware.py).
4. memory: talking heads full vs chunked (scripts/attention_memory.py), by length.
Each part records its numbers and a pass/fail against the targets of docs/
PERFORMANCE.md; a part that raises is recorded as an error and the rest still run.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


import attention  # noqa: E402
from configs import model as model_configs  # noqa: E402
from models import BertForMaskedLM, ModelConfig  # noqa: E402
from scripts import attention_memory, benchmark  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    flags.DEFINE_string("out", "accelerator_check", "directory for check.json and check.md")
    flags.DEFINE_bool("quick", False, "tiny shapes and few steps (a CPU smoke run)")


def model_config(arg: str) -> ModelConfig:
    return ModelConfig.from_config(model_configs.get_config(arg).model)


def fused_parity(quick: bool) -> dict[str, Any]:
    """Max |fused - einsum| of attention outputs and gradients, per key/value size."""
    size, length, batch = ("micro", 16, 2) if quick else ("base", 128, 4)
    out = {}
    for key_size in (None, 128):
        extra = "" if key_size is None else f",key_size={key_size}"
        einsum = model_config(f"size={size},attention_dropout=0{extra}")
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


def bf16_agreement(quick: bool) -> dict[str, Any]:
    size, batch, length = ("micro", 4, 32) if quick else ("base", 16, 128)
    losses = {}
    params = None
    for dtype in ("float32", "bfloat16"):
        cfg = model_config(f"size={size},dtype={dtype},dropout=0,attention_dropout=0")
        model = BertForMaskedLM(cfg)
        rng = np.random.default_rng(0)
        ids = jnp.asarray(rng.integers(5, cfg.vocab_size, (batch, length)), jnp.int32)
        positions = jnp.asarray(np.sort(rng.choice(length, (batch, 20 if not quick else 4)),
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


def speed(quick: bool) -> dict[str, Any]:
    size, batch, steps = ("micro", 8, 3) if quick else ("base", 64, 10)
    config = f"configs/pretrain.py:size={size},dtype=bfloat16,impl=fused,attention_dropout=0"
    result = benchmark.benchmark(config, ["impl=einsum"], batch=batch, seq_len=128,
                                 predictions=20, num_steps=steps, warmup=2 if quick else 3,
                                 device_masking=True)
    entries = {e["name"]: e for e in result["entries"]}
    fused, einsum = entries["ours"], entries["ours[impl=einsum]"]
    masking = entries["ours_device_masking"]
    return {
        "device": result["device"], "peak_flops_per_s": result["peak_flops_per_s"],
        "batch": batch, "seq_len": 128, "entries": result["entries"],
        "mfu_fused": fused["mfu"],
        "fused_vs_einsum_speedup": einsum["step_time_median_s"] / fused["step_time_median_s"],
        "device_masking_share": masking["paired_step_time_ratio"] - 1.0,
        "pass": (fused["mfu"] >= 0.45 and einsum["step_time_median_s"]
                 >= fused["step_time_median_s"]) if not quick else None,
    }


def talking_heads_memory(quick: bool) -> dict[str, Any]:
    size, lengths = ("mini", (512,)) if quick else ("base", (512, 2048, 4096))
    rows = []
    for length in lengths:
        row = {"seq_len": length}
        for impl in ("full", "chunked"):
            cfg = model_config(f"size={size},attention=talking_heads,th_impl={impl},"
                               f"th_chunk=128,max_len={length},dropout=0,attention_dropout=0")
            row[impl] = attention_memory.compiled_bytes(cfg, length, 20)
        row["chunked_over_full"] = row["chunked"]["total_gib"] / row["full"]["total_gib"]
        rows.append(row)
    return {"rows": rows, "pass": rows[-1]["chunked_over_full"] < 1.0 if not quick else None}


PARTS = {"fused_parity": fused_parity, "bf16_agreement": bf16_agreement, "speed": speed,
         "talking_heads_memory": talking_heads_memory}


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Accelerator check ({report['device']}, jax {report['jax']}, "
             f"{report['date']})", "", "| check | result | pass |", "|---|---|---|"]
    for name, part in report["parts"].items():
        if "error" in part:
            lines.append(f"| {name} | error: {part['error']} | no |")
            continue
        shown = {k: v for k, v in part.items() if k not in ("entries", "rows", "pass")}
        text = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in shown.items())
        lines.append(f"| {name} | {text} | {part.get('pass')} |")
    memory = report["parts"].get("talking_heads_memory", {})
    if "rows" in memory:
        lines += ["", "| seq len | full GiB | chunked GiB | chunked / full |",
                  "|---:|---:|---:|---:|"]
        lines += [f"| {r['seq_len']} | {r['full']['total_gib']:.2f} | "
                  f"{r['chunked']['total_gib']:.2f} | {r['chunked_over_full']:.2f} |"
                  for r in memory["rows"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    del argv
    os.makedirs(FLAGS.out, exist_ok=True)
    device = jax.devices()[0]
    report = {"device": f"{device.platform}:{device.device_kind}", "jax": jax.__version__,
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": FLAGS.quick, "parts": {}}
    for name, check in PARTS.items():
        start = time.time()
        try:
            report["parts"][name] = check(FLAGS.quick)
        except Exception as e:  # noqa: BLE001 - record it, run the other parts
            traceback.print_exc()
            report["parts"][name] = {"error": f"{type(e).__name__}: {e}"}
        report["parts"][name]["seconds"] = time.time() - start
        print(f"{name}: {json.dumps(report['parts'][name], default=str)[:400]}", flush=True)
    with open(os.path.join(FLAGS.out, "check.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    with open(os.path.join(FLAGS.out, "check.md"), "w") as f:
        f.write(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    define_flags()
    app.run(main)
