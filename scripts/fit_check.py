"""Does a config's train step fit a TPU slice? Compiled ahead of time on this CPU host.

  python scripts/fit_check.py --config configs/pretrain.py:size=base,batch=256 --topology v4-8
  python scripts/fit_check.py --config configs/pretrain.py:row=lowrank_2a_h8,batch=256 \
      --topology v5e-16 --mesh data=4,fsdp=4
  python scripts/fit_check.py --config configs/pretrain.py:size=base --topology h100-8

Prints per chip: the arguments, outputs, temporaries and peak of XLA's memory plan
against the chip's HBM, XLA's FLOPs beside the analytic count, bytes accessed, the
collectives by kind with their bytes, and a roofline step time and MFU. Exits 1 when
the step does not fit, naming the bytes missing and the largest batch that fits (found
by compiling at halved batches). Needs libtpu for TPU slices: pip install -e ".[tpu-plan]"
(training/fit_check.py). Compiled programs go to the persistent compilation cache
(--config.jax_cache: auto, none or a folder), so a rerun of a row reads its program.
"""

from __future__ import annotations

import os
import sys
import time

from absl import app, flags, logging
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only (see
    tests/test_scripts_import.py)."""
    config_flags.DEFINE_config_file("config", None, "configs/pretrain.py[:ARGS]",
                                    lock_config=False)
    flags.DEFINE_string("topology", None, "v4-N, v5p-N (N cores), v5e-N, v6e-N (N chips), "
                        "h100-N, h200-N, cpu-N")
    flags.DEFINE_string("mesh", None, "e.g. data=2,fsdp=4,tensor=1 (default: the config's)")
    flags.DEFINE_bool("search", True, "when it does not fit: compile at halved batch sizes "
                      "and report the largest that fits")
    flags.DEFINE_bool("search_mesh", False, "compile every data x fsdp split of the slice "
                      "(tensor=1) and report which fit, and the one with the lowest peak")
    flags.DEFINE_list("grid", None, "instead of one config: every row of these grids "
                      "(configs/grids.py), each as --config with row=NAME added")
    flags.DEFINE_string("out_dir", None, "with --grid: one ROW.json per row (rows with one "
                        "are skipped: a resumable sweep) and table.md of all of them")
    flags.DEFINE_integer("steps", 1_000_000, "training steps for the hours column")
    flags.mark_flags_as_required(["config", "topology"])


def parse_mesh(spec: str) -> dict[str, int]:
    mesh = {}
    for part in spec.split(","):
        name, sep, value = part.partition("=")
        if not sep or not value.lstrip("-").isdigit():
            raise ValueError(f"--mesh={spec}: use AXIS=N,... over data, fsdp, tensor")
        mesh[name.strip()] = int(value)
    return mesh


def main(argv: list[str]) -> None:
    del argv
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)
    from common import compile_cache
    from training import fit_check

    try:
        topology = fit_check.parse_topology(FLAGS.topology)
        fit_check.prepare_environment(topology)  # before JAX starts a backend
        config = FLAGS.config
        # config.jax_cache: auto | none | a folder (common/compile_cache.py); on stderr,
        # since stdout is the report. A search or grid recompiles rows a rerun has seen.
        directory = compile_cache.enable(config.get("jax_cache", compile_cache.AUTO))
        print(compile_cache.describe(directory), file=sys.stderr, flush=True)
        if FLAGS.mesh:
            config.mesh.update({"data": 1, "fsdp": 1, "tensor": 1} | parse_mesh(FLAGS.mesh))
        if FLAGS.grid:
            run_grid(config, topology, fit_check)
            return
        if FLAGS.search_mesh:
            if not search_mesh(config, topology, fit_check):
                sys.exit(1)
            return
        start = time.perf_counter()
        report = fit_check.check(config, topology)
        print("\n".join(report.lines()))
        print(f"(compiled in {time.perf_counter() - start:.0f} s on this host)", flush=True)
        if report.fits:
            return
        if FLAGS.search:
            found = largest_fitting_batch(config, topology, fit_check)
            print(f"largest batch that fits this mesh: batch_size={found}" if found else
                  "no batch fits this mesh: shard the parameters (--mesh fsdp=N) or use a "
                  "larger slice")
        sys.exit(1)
    except ValueError as e:  # bad topology, mesh or config: one line
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def run_grid(config, topology, fit_check) -> None:
    """Each row of the grids on the same slice, mesh and arguments; resumable."""
    import copy
    import gc
    import glob
    import json

    import jax

    from common.files import write_json_atomic, write_text_atomic
    from configs import grids
    from configs import model as model_configs
    from training import pretrain

    if not FLAGS.out_dir:
        raise ValueError("--grid needs --out_dir for its records")
    unknown = sorted(set(FLAGS.grid) - set(grids.GRIDS))
    if unknown:
        raise ValueError(f"--grid: {', '.join(unknown)} unknown; choose from {sorted(grids.GRIDS)}")
    vocab = int(config.data.vocab_size)
    for row in (row for name in FLAGS.grid for row in grids.GRIDS[name]):
        path = os.path.join(FLAGS.out_dir, f"{row.name}.json")
        row_config = copy.deepcopy(config)
        with row_config.unlocked():
            model_configs.apply_row(row_config.model, row.name)
        if os.path.exists(path):
            with open(path) as f:
                record = json.load(f)
            if record.get("analytic_bytes") is None:  # a record from before the count
                mesh = record["mesh"]  # the default rules: batch over data x fsdp
                record["analytic_bytes"] = fit_check.analytic_peak(
                    row_config, pretrain.model_config_for(row_config, vocab),
                    mesh["data"] * mesh["fsdp"], mesh["fsdp"] * mesh["tensor"])
                write_json_atomic(path, record)
            print(f"{row.name}: done ({path})")
            continue
        start = time.perf_counter()
        report = fit_check.check(row_config, topology)
        seconds = time.perf_counter() - start
        print(f"{row.name}: " + "; ".join(report.lines()[1:]), flush=True)
        write_json_atomic(path, fit_check.to_json(report, row.name, seconds, FLAGS.steps))
        # Each compiled step stays in JAX's caches: without clearing them the v4-8 grid
        # grew to 24 GB of host memory after 12 rows and was killed (it resumed from its
        # records). Whether clearing bounds it is not measured: the last two 24-layer
        # rows, run with it, peaked at 21.8 GB.
        jax.clear_caches()
        gc.collect()
    records = []
    for path in sorted(glob.glob(os.path.join(FLAGS.out_dir, "*.json"))):
        with open(path) as f:
            records.append(json.load(f))
    order = [row.name for rows in grids.GRIDS.values() for row in rows]
    records.sort(key=lambda r: order.index(r["row"]) if r["row"] in order else len(order))
    table = os.path.join(FLAGS.out_dir, "table.md")
    write_text_atomic(table, fit_check.scale_table(records) + "\n")
    print(f"wrote {table}")


def search_mesh(config, topology, fit_check) -> bool:
    """Every data x fsdp split of the chips, compiled; True when one fits."""
    results = []
    fsdp = 1
    while fsdp <= topology.chips:
        config.mesh.update({"data": topology.chips // fsdp, "fsdp": fsdp, "tensor": 1})
        if config.batch_size % (topology.chips * config.grad_accum_steps) == 0:
            report = fit_check.check(config, topology)
            results.append((fsdp, report))
            seconds = report.step_seconds()  # None on host devices (no chip figures)
            print(f"  data={topology.chips // fsdp},fsdp={fsdp}: " + (
                f"peak {report.judged_peak / fit_check.GiB:.2f} GiB"
                + (f", roofline {seconds * 1e3:.3g} ms" if seconds else "")
                if report.fits else f"{report.missing / fit_check.GiB:.2f} GiB missing"),
                flush=True)
        fsdp *= 2
    fitting = [(fsdp, r) for fsdp, r in results if r.fits]
    if not fitting:
        print("no data x fsdp split fits: a larger slice, a smaller batch, or remat")
        return False
    fsdp, best = min(fitting, key=lambda item: item[1].judged_peak)
    print(f"lowest peak: --mesh data={topology.chips // fsdp},fsdp={fsdp} "
          f"({best.judged_peak / fit_check.GiB:.2f} GiB per chip)")
    return True


def largest_fitting_batch(config, topology, fit_check) -> int | None:
    from training import sharding

    divisor = sharding.batch_divisor(
        sharding.make_mesh(dict(config.mesh), fit_check.devices(topology)),
        sharding.rules_from_config(config.logical_axis_rules)) * config.grad_accum_steps
    batch = config.batch_size // 2
    while batch >= divisor:
        batch -= batch % divisor
        config.batch_size = batch
        report = fit_check.check(config, topology)
        print(f"  batch_size={batch}: " + (f"peak {report.peak / fit_check.GiB:.2f} GiB, fits"
              if report.fits else f"{report.missing / fit_check.GiB:.2f} GiB missing"),
              flush=True)
        if report.fits:
            return batch
        batch //= 2
    return None


if __name__ == "__main__":
    define_flags()
    app.run(main)
