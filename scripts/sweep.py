"""Runs a grid of rows as pretraining + GLUE fine-tuning, locally or as cluster scripts.

  python scripts/sweep.py --grid lowrank_table2a --out runs/t2a --dry_run
  python scripts/sweep.py --grid talking_heads_cpu --out runs/th_cpu \
      --pretrain_args steps=2000,batch=64 --pretrain_overrides data.corpus=../shared/data/corpus \
      --glue_tasks sst2,mrpc,rte --glue_args seeds=5 --glue_dir ../shared/data/glue \
      --seeds 0,1,2 --parallel 2
  python scripts/sweep.py --grid talking_heads --out gs://... --mode cluster   # scripts only
  python scripts/sweep.py --grid_file my_grid.py --out runs/mine               # a user's grid
  python scripts/tables.py --out runs/th_cpu --plots runs/th_cpu/plots         # the tables

The planning, running and cluster scripts are analysis/sweep.py's.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

from analysis import sweep_grids
from analysis.sweep import (
    Settings,
    parse_seeds,
    plan,
    print_commands,
    print_stats,
    resolve_glue_tasks,
    run_local,
    select_rows,
    write_cluster,
    write_manifest,
)
from configs import grids
from training import results

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only: tests import this
    module, and absl's global flags of two scripts (--out in several) collide in one
    process."""
    flags.DEFINE_string("grid", None,
                        f"a grid of configs/grids.py: {', '.join(sorted(grids.GRIDS))}")
    flags.DEFINE_string("grid_file", None,
                        "a Python file defining GRID (see analysis/sweep_grids.py)")
    flags.DEFINE_string("out", None, "root directory of the sweep's runs")
    flags.DEFINE_string("pretrain_args", "", "configs/pretrain.py args added to every row's, "
                        "e.g. steps=2000,batch=64")
    flags.DEFINE_multi_string("pretrain_overrides", [], "FIELD=VALUE, passed to train.py as "
                              "--config.FIELD=VALUE (repeatable), e.g. data.corpus=DIR; the runs "
                              "start in the repository root, so relative paths are relative to it")
    flags.DEFINE_string("glue_tasks", "all",
                        "GLUE tasks after pretraining: comma list, all or none; squad "
                        "adds SQuAD v1.1 (eval_squad.py)")
    flags.DEFINE_string("glue_args", "", "configs/glue.py args, e.g. seeds=5,max_train=2000")
    flags.DEFINE_multi_string("glue_overrides", [], "FIELD=VALUE, passed to eval_glue.py as "
                              "--config.FIELD=VALUE (repeatable)")
    flags.DEFINE_string("glue_dir", None, "GLUE TSV folder; unset: nyu-mll/glue from the hub")
    flags.DEFINE_string("squad_dir", None, "with squad in --glue_tasks: the folder of "
                        "train-v1.1.json and dev-v1.1.json; unset: rajpurkar/squad from the hub")
    flags.DEFINE_string("squad_args", "", "configs/squad.py args added after --glue_args for "
                        "SQuAD, e.g. doc_stride=64,seq_len=256")
    flags.DEFINE_list("seeds", [], "pretraining seeds, each in RUN=OUT/ROW/seed{S}; "
                      "empty: the config's seed, RUN=OUT/ROW")
    flags.DEFINE_list("rows", [], "only these rows of the grid, in the grid's order; empty: all")
    flags.DEFINE_integer("parallel", 1, "local mode: runs at a time", lower_bound=1)
    flags.DEFINE_enum("mode", "local", ["local", "cluster"],
                      "local: run here; cluster: write run scripts and a launch list only")
    flags.DEFINE_bool("dry_run", False, "print parameters, FLOPs and commands; write nothing")
    flags.DEFINE_string("jax_cache", "auto", "persistent XLA compilation cache of the runs: "
                        "auto (OUT/jax_cache), none, or a directory")
    flags.DEFINE_string("python", sys.executable, "interpreter for train.py and eval_glue.py")
    flags.mark_flag_as_required("out")


# Arguments the sweep sets itself; a user's value would silently fight it.
def settings_from_flags() -> tuple[str, list[grids.Row], Settings, list[str]]:
    label, rows = sweep_grids.load_grid(FLAGS.grid, FLAGS.grid_file)
    rows = select_rows(rows, FLAGS.rows)
    out = os.path.abspath(FLAGS.out)
    glue_dir = os.path.abspath(FLAGS.glue_dir) if FLAGS.glue_dir else None
    tasks, left_out = resolve_glue_tasks(FLAGS.glue_tasks, glue_dir)
    cache = {"none": None, "": None}.get(FLAGS.jax_cache, os.path.abspath(FLAGS.jax_cache))
    if FLAGS.jax_cache == "auto":  # a cache the user's environment names wins over ours
        cache = os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(
            out, results.JAX_CACHE)
    settings = Settings(
        out=out, pretrain_args=FLAGS.pretrain_args,
        pretrain_overrides=tuple(map(sweep_grids.normalize_override, FLAGS.pretrain_overrides)),
        glue_tasks=tuple(tasks), glue_args=FLAGS.glue_args or grids.GLUE_PROTOCOLS.get(label, ""),
        glue_overrides=tuple(map(sweep_grids.normalize_override, FLAGS.glue_overrides)),
        glue_dir=glue_dir,
        squad_dir=os.path.abspath(FLAGS.squad_dir) if FLAGS.squad_dir else None,
        squad_args=FLAGS.squad_args, seeds=parse_seeds(FLAGS.seeds), jax_cache=cache)
    return label, rows, settings, left_out


def main(argv: list[str]) -> None:
    del argv
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)  # JAX's backend notes are not progress
    try:
        label, rows, settings, left_out = settings_from_flags()
        runs = plan(rows, settings)
    except ValueError as e:  # bad flags, grid file or config: one line, nothing launched
        sys.exit(f"error: {e}")
    if left_out:
        print(f"glue_tasks=all: {', '.join(left_out)} left out ({settings.glue_dir} "
              f"lacks their train/dev files)")
    pretraining = sum(not r.row.pretrained_by for r in runs)
    fine_tuning = sum(len(r.glue) for r in runs)
    print(f"sweep {label}: {len(rows)} rows x {len(settings.seeds)} seed(s) = {len(runs)} runs: "
          f"{pretraining + fine_tuning} jobs ({pretraining} pretraining, {fine_tuning} GLUE "
          f"fine-tuning, each over its learning rates and seeds); GLUE: "
          f"{', '.join(settings.glue_tasks) or 'none'}")
    if settings.glue_tasks and not FLAGS.glue_args:
        print(f"GLUE args: {settings.glue_args} (the grid's own protocol, --glue_args replaces "
              f"it)" if settings.glue_args else "GLUE args: none given, so configs/glue.py's "
              "full protocol (4 learning rates x 3 seeds x 3 epochs); --glue_args for less")
    if FLAGS.dry_run:
        print_stats(runs, settings)
        print_commands(runs, FLAGS.python)
        return
    os.makedirs(settings.out, exist_ok=True)
    write_manifest(label, rows, settings)
    if FLAGS.mode == "cluster":
        list_path = write_cluster(runs, settings, FLAGS.python)
        print(f"wrote {len(runs)} run scripts, listed in {list_path}; e.g.\n"
              f"  xargs -n 1 -P 4 bash < {list_path}        # 4 at a time here\n"
              f"  while read s; do sbatch --gres=gpu:1 \"$s\"; done < {list_path}")
        return
    failed = run_local(runs, settings, FLAGS.parallel, FLAGS.python)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    define_flags()
    app.run(main)
