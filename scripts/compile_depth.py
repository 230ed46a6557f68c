"""Compile time of the train step against depth, layers scanned and unrolled.

  python scripts/compile_depth.py --config configs/pretrain.py:size=base --layers 6,12,24 \
      --batch 8 --seq_len 128 [--json depth.json]

For each depth and each layout (model.scan_layers true / false) the real train step
(scripts/benchmark.py's: AdamW, clipping, the sparse MLM head) is lowered and compiled
from abstract shapes with the persistent cache off, so every figure is a cold compile;
nothing is run. The rows alternate layouts at each depth, so a load change on a shared
machine hits both alike. Unrolled, the compiler sees every layer and its time grows
with the depth; scanned, it sees one, and the time should stay flat.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("config", "configs/pretrain.py:size=base", "config file[:ARGS]")
    flags.DEFINE_list("layers", ["6", "12", "24"], "depths to compile")
    flags.DEFINE_integer("batch", 8, "sequences per step")
    flags.DEFINE_integer("seq_len", 128, "tokens per sequence")
    flags.DEFINE_integer("predictions", 20, "MLM targets per sequence")
    flags.DEFINE_string("json", None, "write the rows here as JSON (after every row)")


def measure(config: str, layers: list[int], batch: int, seq_len: int, predictions: int,
            json_path: str | None = None) -> list[dict[str, Any]]:
    """One row per (depth, layout): lower and compile seconds, XLA's memory plan."""
    from common import compile_cache
    from common.files import write_json_atomic
    from models import ModelConfig
    from scripts import benchmark

    base = benchmark.load_config(config)
    shapes = benchmark.resolve_shapes(base, batch, seq_len, predictions)
    rows = []
    with compile_cache.disabled():  # every figure a compile, not a cache read
        for depth in layers:
            for scan in (True, False):
                spec = f"{config}{',' if ':' in config else ':'}layers={depth},scan={scan}"
                loaded = benchmark.load_config(spec)
                cfg = ModelConfig.from_config(loaded.model)
                start = time.perf_counter()
                got = benchmark.compile_seconds(cfg, benchmark.optimizer_config(loaded), shapes)
                row = {"layers": depth, "scan_layers": scan, **got,
                       "wall_s": time.perf_counter() - start}
                rows.append(row)
                print(f"layers={depth} scan={str(scan).lower()}: lowered in "
                      f"{got['lower_s']:.1f}s, compiled in {got['compile_s']:.1f}s", flush=True)
                if json_path:
                    write_json_atomic(json_path, {"config": config, "batch": batch,
                                                  "seq_len": seq_len, "rows": rows})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    by_depth: dict[int, dict[bool, dict[str, Any]]] = {}
    for row in rows:
        by_depth.setdefault(row["layers"], {})[row["scan_layers"]] = row
    lines = ["| layers | scanned: lower + compile (s) | unrolled: lower + compile (s) | "
             "unrolled / scanned |", "|---:|---:|---:|---:|"]
    for depth, pair in by_depth.items():
        seconds = {scan: r["lower_s"] + r["compile_s"] for scan, r in pair.items()}
        lines.append(f"| {depth} | {seconds[True]:.1f} | {seconds[False]:.1f} | "
                     f"{seconds[False] / seconds[True]:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    try:
        layers = [int(x) for x in FLAGS.layers]
    except ValueError:
        print(f"error: --layers={','.join(FLAGS.layers)} must be integers", file=sys.stderr)
        sys.exit(1)
    rows = measure(FLAGS.config, layers, FLAGS.batch, FLAGS.seq_len, FLAGS.predictions,
                   FLAGS.json)
    print(markdown(rows))


if __name__ == "__main__":
    define_flags()
    app.run(main)
