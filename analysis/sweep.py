"""A sweep of a grid's rows: planning every run (pretraining, then GLUE and SQuAD
fine-tuning from its checkpoint), running them locally or writing cluster scripts, and
saying what is finished. scripts/sweep.py is its command line.

Every row (x every --seeds seed) is one run: `train.py` into RUN/pretrain, then
one `eval_glue.py` per task into RUN/glue/TASK starting from that checkpoint
(layout: training/results.py; grids: analysis/sweep_grids.py). Local mode runs
--parallel runs at a time, skips what is finished (pretraining: final_metrics.json
at the requested step; GLUE: results.json from the requested checkpoint holding
every requested learning rate and seed) and reruns the rest, which train.py and
eval_glue.py resume by themselves. A failed step is reported with its log and the
sweep goes on with the other runs; the exit status is 1 if anything failed.
Cluster mode writes RUN/run.sh per run and OUT/launch_list.txt for a scheduler, and
runs nothing; run.sh skips finished steps by the same test, asked through
`python -m training.results --is_finished` (training/results.py).
--dry_run prints every row's parameters and FLOPs per token and the commands,
and writes nothing.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import shlex
import subprocess
import threading
import time
from typing import Any

from analysis import sweep_grids
from common.files import write_text_atomic
from configs import glue as glue_configs
from configs import grids, overrides
from training import results

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_OWN_PRETRAIN_ARGS = {"row"}
_OWN_GLUE_ARGS = {"task", "init_from", "glue_dir", "squad_dir"}
SQUAD = "SQuAD"  # the task name --glue_tasks=squad runs


# -- what to run -------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Settings:
    """The sweep's flags, so that planning is a function of values, not of FLAGS."""

    out: str
    pretrain_args: str = ""
    pretrain_overrides: tuple[str, ...] = ()
    glue_tasks: tuple[str, ...] = ()
    glue_args: str = ""
    glue_overrides: tuple[str, ...] = ()
    glue_dir: str | None = None
    squad_dir: str | None = None
    squad_args: str = ""
    seeds: tuple[int | None, ...] = (None,)
    jax_cache: str | None = None


@dataclasses.dataclass(frozen=True)
class Step:
    """One command of a run: pretraining, or fine-tuning on one GLUE task."""

    label: str  # "ROW[ seed S] pretrain" / "ROW[ seed S] glue SST-2"
    argv: tuple[str, ...]  # after the interpreter, run from the repository root
    workdir: str
    log: str
    target: results.PretrainTarget | results.GlueTarget  # what "finished" means


@dataclasses.dataclass(frozen=True)
class Run:
    """A row at one pretraining seed: pretraining, then its GLUE tasks in turn."""

    row: grids.Row
    seed: int | None
    directory: str
    pretrain: Step  # a pretrained_by row's is its source row's step, run by that row
    glue: tuple[Step, ...]
    model: Any  # models.ModelConfig at the config's vocabulary
    seq_len: int  # tokens per sequence (attention FLOPs depend on it)
    run_vocab: int  # vocabulary the run will have: the tokenizer it trains (or loads)


def parse_seeds(values: list[str]) -> tuple[int | None, ...]:
    try:
        seeds = tuple(int(v) for v in values)
    except ValueError:
        raise ValueError(f"--seeds={','.join(values)} must be integers") from None
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds={','.join(values)} repeats a seed")
    return seeds or (None,)


def resolve_glue_tasks(spec: str, glue_dir: str | None) -> tuple[list[str], list[str]]:
    """(tasks to run, tasks of 'all' left out because glue_dir lacks their files).

    An explicitly named task is always run, so that missing data is an error the
    user sees rather than a silently shorter table.
    """
    import glue
    from finetuning import registry

    spec = spec.strip()
    if spec.lower() in ("", "none"):
        return [], []
    if spec.lower() != "all":  # any registered task (an unknown one: its error line)
        names = [registry.get(name).name for name in spec.split(",") if name.strip()]
        return list(dict.fromkeys(names)), []
    every = [task.name for task in registry.in_all()]  # GLUE's nine
    if not glue_dir:
        return every, []
    present, missing = [], []
    for name in every:
        task = glue.get_task(name)
        splits = ("train", *task.dev_splits)
        ok = all(glue.split_path(task, glue_dir, s).exists() for s in splits)
        (present if ok else missing).append(task.name)
    return present, missing


def check_user_args(arg: str, own: set[str], flag: str) -> None:
    clash = sorted(set(overrides.parse_arg(arg)) & own)
    if clash:
        raise ValueError(f"--{flag} must not set {clash}: the sweep sets it")


def plan(rows: list[grids.Row], settings: Settings) -> list[Run]:
    """Every run's commands, seed-major: after one pass over the rows the table is
    complete for one seed, and further seeds add error bars. Configs are built
    here, so a bad argument fails before anything is launched."""
    check_user_args(settings.pretrain_args, _OWN_PRETRAIN_ARGS, "pretrain_args")
    check_user_args(settings.glue_args, _OWN_GLUE_ARGS, "glue_args")
    check_user_args(settings.squad_args, _OWN_GLUE_ARGS, "squad_args")
    if settings.seeds != (None,):
        check_user_args(settings.pretrain_args, {"seed"}, "pretrain_args (with --seeds)")
    names = {row.name for row in rows}
    for row in rows:
        check_user_args(sweep_grids.glue_arg(row), _OWN_GLUE_ARGS, f"grid row {row.name}: glue")
        if row.pretrained_by and row.pretrained_by not in names:
            raise ValueError(f"--rows: {row.name} fine-tunes the pretraining of "
                             f"{row.pretrained_by}; select that row too")
    runs = []
    for seed in settings.seeds:
        planned: dict[str, Run] = {}
        for row in rows:
            source = planned.get(row.pretrained_by) if row.pretrained_by else None
            planned[row.name] = plan_run(row, seed, settings, source)
            runs.append(planned[row.name])
    return runs


def squad_step(label: str, row_glue_args: str, settings: Settings, workdir: str,
               pretrain_workdir: str, init_step: int) -> Step:
    """eval_squad.py for a run: the row's and sweep's fine-tuning args (GLUE's protocol
    keys mean the same in configs/squad.py), then --squad_args."""
    from configs import squad as squad_configs

    arg = sweep_grids.join_args(row_glue_args, settings.squad_args)
    config = squad_configs.get_config(arg)  # a bad arg fails here, before any launch
    overrides.apply_overrides(config, list(settings.glue_overrides))
    extra = [f"--config.squad_dir={settings.squad_dir}"] if settings.squad_dir else []
    return Step(
        label=f"{label} squad",
        argv=("eval_squad.py", "--config", f"configs/squad.py:{arg}", "--workdir", workdir,
              f"--config.init_from={pretrain_workdir}", *extra,
              *(f"--config.{o}" for o in settings.glue_overrides)),
        workdir=workdir, log=os.path.join(workdir, SQUAD_LOG),
        target=results.GlueTarget(workdir, SQUAD, init_step,
                                  tuple(float(lr) for lr in config.learning_rates),
                                  config.num_seeds))


SQUAD_LOG = "eval_squad.log"
FINETUNE_LOG = "finetune.log"


def plugin_step(task: str, label: str, row_glue_args: str, settings: Settings, workdir: str,
                pretrain_workdir: str, init_step: int) -> Step:
    """finetune.py for a task registered by a plug-in (tasks/ or FINETUNING_TASKS): the
    row's and sweep's fine-tuning args, as GLUE's."""
    from configs import finetune as finetune_configs

    arg = sweep_grids.join_args(f"task={task}", row_glue_args)
    config = finetune_configs.get_config(arg)  # a bad arg fails here, before any launch
    # The sweep's --glue_overrides that this task's config has (write_test_predictions
    # and other GLUE-only fields are GLUE's), applied here too so "finished" counts the
    # same seeds and rates the run will.
    own = [o for o in settings.glue_overrides
           if overrides.split_override(o)[0].split(".")[0] in config]
    overrides.apply_overrides(config, own)
    return Step(
        label=f"{label} {task}",
        argv=("finetune.py", "--config", f"configs/finetune.py:{arg}", "--workdir", workdir,
              f"--config.init_from={pretrain_workdir}", *(f"--config.{o}" for o in own)),
        workdir=workdir, log=os.path.join(workdir, FINETUNE_LOG),
        target=results.GlueTarget(workdir, task, init_step,
                                  tuple(float(lr) for lr in config.learning_rates),
                                  config.num_seeds))


def pretrain_overrides(settings: Settings) -> list[str]:
    """The user's overrides, plus the sweep's shared data cache unless they set one."""
    keys = {overrides.split_override(o)[0] for o in settings.pretrain_overrides}
    shared = [] if keys & {"data.cache_dir", "data.tokenizer"} else [
        f"data.cache_dir={os.path.join(settings.out, results.DATA_CACHE)}"]
    return [*settings.pretrain_overrides, *shared]


def plan_run(row: grids.Row, seed: int | None, settings: Settings,
             source: Run | None = None) -> Run:
    """One run's steps; a row pretrained by `source` reuses that run's pretraining step."""
    from models import ModelConfig

    row_glue_args = sweep_grids.glue_arg(row, settings.glue_args)
    glue_config = glue_configs.get_config(row_glue_args)
    overrides.apply_overrides(glue_config, list(settings.glue_overrides))

    arg = sweep_grids.join_args(sweep_grids.row_arg(row), settings.pretrain_args,
                                "" if seed is None else f"seed={seed}")
    fields = pretrain_overrides(settings)
    config = sweep_grids.pretrain_config(arg, fields)
    model = ModelConfig.from_config(config.model)  # one clear line for a bad combination
    directory = results.run_dir(settings.out, row.name, seed)
    label = row.name if seed is None else f"{row.name} seed {seed}"
    pretrain_workdir = (source.pretrain.workdir if source else
                        results.pretrain_dir(directory))
    init_step = glue_config.checkpoint_step or config.num_train_steps
    learning_rates = tuple(float(lr) for lr in glue_config.learning_rates)
    pretrain = source.pretrain if source else Step(
        label=f"{label} pretrain",
        argv=("train.py", "--config", f"configs/pretrain.py:{arg}",
              "--workdir", pretrain_workdir, *(f"--config.{o}" for o in fields)),
        workdir=pretrain_workdir,
        log=os.path.join(pretrain_workdir, results.PRETRAIN_LOG),
        target=results.PretrainTarget(pretrain_workdir, config.num_train_steps),
    )
    glue_steps = []
    for task in settings.glue_tasks:
        workdir = results.glue_dir(directory, task)
        if task == SQUAD:
            glue_steps.append(squad_step(label, row_glue_args, settings, workdir,
                                         pretrain_workdir, init_step))
            continue
        if not glue_configs.is_glue_task(task):  # a plug-in task: finetune.py runs it
            glue_steps.append(plugin_step(task, label, row_glue_args, settings, workdir,
                                          pretrain_workdir, init_step))
            continue
        glue_arg = sweep_grids.join_args(f"task={task}", row_glue_args)
        extra = [f"--config.glue_dir={settings.glue_dir}"] if settings.glue_dir else []
        glue_steps.append(Step(
            label=f"{label} glue {task}",
            argv=("eval_glue.py", "--config", f"configs/glue.py:{glue_arg}",
                  "--workdir", workdir, f"--config.init_from={pretrain_workdir}", *extra,
                  *(f"--config.{o}" for o in settings.glue_overrides)),
            workdir=workdir,
            log=os.path.join(workdir, results.GLUE_LOG),
            target=results.GlueTarget(workdir, task, init_step, learning_rates,
                                      glue_config.num_seeds),
        ))
    return Run(row, seed, directory, pretrain, tuple(glue_steps), model,
               config.data.max_seq_length,
               model.vocab_size if config.data.tokenizer else config.data.vocab_size)


# -- local mode --------------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    step: Step
    status: str  # finished | skipped | failed | not run
    seconds: float = 0.0
    detail: str = ""


class Console:
    """Progress lines from several worker threads, one whole line at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def print(self, text: str) -> None:
        with self._lock:
            print(text, flush=True)


def child_env(settings: Settings) -> dict[str, str]:
    """The runs' environment: a shared persistent compilation cache.

    Short runs spend most of their time compiling (model init alone is hundreds
    of small XLA programs), and runs of a row differ only in seed or task, so a
    cache shared by the sweep saves most of it. The thresholds are zeroed because
    the default (programs over 1 s) would skip exactly those small programs.
    """
    env = dict(os.environ)
    env.update(plugin_variables())
    if settings.jax_cache:
        env["JAX_COMPILATION_CACHE_DIR"] = settings.jax_cache
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    return env


# Plug-in variants and tasks named by file: the runs (which start in the repository root,
# or on a cluster node) need them as the sweep saw them.
PLUGIN_VARIABLES = ("ATTENTION_PLUGINS", "FINETUNING_TASKS")


def plugin_variables() -> dict[str, str]:
    """The plug-in variables set here, their paths made absolute."""
    from common.plugins import plugin_paths

    return {name: os.pathsep.join(os.path.abspath(p) for p in plugin_paths(name))
            for name in PLUGIN_VARIABLES if plugin_paths(name)}


def run_step(step: Step, python: str, env: dict[str, str]) -> tuple[int, float]:
    """Runs one command with its output appended to the step's log; (exit code, seconds)."""
    os.makedirs(step.workdir, exist_ok=True)
    start = time.time()
    with open(step.log, "a") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} "
                  f"{shlex.join([python, *step.argv])}\n")
        log.flush()
        code = subprocess.run([python, *step.argv], cwd=REPO, env=env, stdout=log,
                              stderr=subprocess.STDOUT, check=False).returncode
    return code, time.time() - start


def execute(run: Run, python: str, env: dict[str, str], console: Console,
            stop: threading.Event, pretrained: dict[str, threading.Event]) -> list[Outcome]:
    """Pretraining, then each GLUE task; a failed pretraining leaves its GLUE steps unrun.
    A pretrained_by run waits for its source's pretraining (`pretrained`, by workdir)."""
    outcomes: list[Outcome] = []
    try:
        for step in (run.pretrain, *run.glue):
            if step is run.pretrain and run.row.pretrained_by:
                outcomes.append(wait_for_source(run, pretrained[step.workdir], console, stop))
                continue
            if stop.is_set():
                outcomes.append(Outcome(step, "not run", detail="interrupted"))
                continue
            if step is not run.pretrain and outcomes[0].status in ("failed", "not run"):
                outcomes.append(Outcome(step, "not run", detail="pretraining failed"))
                continue
            if step.target.finished():
                console.print(f"[skip] {step.label}: finished ({step.target.marker})")
                outcomes.append(Outcome(step, "skipped"))
            else:
                outcomes.append(run_and_report(step, python, env, console))
            if step is run.pretrain:
                pretrained[step.workdir].set()
    finally:
        if not run.row.pretrained_by:  # whatever happened, nobody waits on it for ever
            pretrained[run.pretrain.workdir].set()
    return outcomes


def wait_for_source(run: Run, done: threading.Event, console: Console,
                    stop: threading.Event) -> Outcome:
    """The shared pretraining, once its own run has finished (or failed) it."""
    while not done.wait(timeout=1.0):
        if stop.is_set():
            return Outcome(run.pretrain, "not run", detail="interrupted")
    if run.pretrain.target.finished():
        console.print(f"[skip] {run.row.name} pretrain: shared with {run.row.pretrained_by}")
        return Outcome(run.pretrain, "skipped")
    return Outcome(run.pretrain, "not run", detail=f"{run.row.pretrained_by}'s pretraining "
                                                   f"did not finish")


def run_and_report(step: Step, python: str, env: dict[str, str], console: Console) -> Outcome:
    console.print(f"[run ] {step.label} (log: {step.log})")
    code, seconds = run_step(step, python, env)
    if code == 0:
        console.print(f"[done] {step.label} in {seconds:.0f} s")
        return Outcome(step, "finished", seconds)
    console.print(f"[FAIL] {step.label}: exit {code} after {seconds:.0f} s; log: {step.log}")
    return Outcome(step, "failed", seconds, f"exit {code}")


def run_local(runs: list[Run], settings: Settings, parallel: int, python: str) -> int:
    """Runs everything; returns the number of failed steps."""
    console, env, stop = Console(), child_env(settings), threading.Event()
    # Set once a pretraining step has an outcome. Sources come before the rows they
    # pretrain, and the pool starts runs in order, so a waiting run never holds the
    # worker its source needs.
    pretrained = {r.pretrain.workdir: threading.Event() for r in runs}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=parallel)
    futures = [pool.submit(execute, r, python, env, console, stop, pretrained) for r in runs]
    try:
        results = [f.result() for f in futures]
    except KeyboardInterrupt:
        # The runs in progress got the signal too and save a checkpoint; start no more.
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        console.print("interrupted; rerun the same command to continue")
        raise SystemExit(130) from None
    pool.shutdown()
    outcomes = [o for result in results for o in result]
    counts = {s: sum(o.status == s for o in outcomes)
              for s in ("finished", "skipped", "failed", "not run")}
    console.print("sweep: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    bad = [o for o in outcomes if o.status in ("failed", "not run")]
    for o in bad:
        where = f"; log: {o.step.log}{log_tail(o.step.log)}" if o.status == "failed" else ""
        console.print(f"  {o.status}: {o.step.label} ({o.detail}){where}")
    return len(bad)


def log_tail(path: str, lines: int = 3) -> str:
    try:
        with open(path, errors="replace") as f:
            last = [line.rstrip() for line in f.readlines()[-lines:]]
    except OSError:
        return ""
    return "".join(f"\n      {line}" for line in last)


# -- cluster mode ------------------------------------------------------------------------
SCRIPT_HEADER = """\
#!/usr/bin/env bash
# {label}: pretraining, then GLUE. Written by scripts/sweep.py; safe to rerun:
# finished steps are skipped (training/results.py decides, as for a local sweep),
# unfinished or stale ones (fewer steps, seeds or learning rates) run and resume.
set -uo pipefail
cd {repo} || exit 1
PYTHON=${{PYTHON:-{python}}}
{cache}
run() {{  # run LOG COMMAND...: output to stdout and appended to LOG
  local log=$1; shift
  mkdir -p "$(dirname "$log")"
  echo "=== $(date '+%F %T') $*" >> "$log"
  "$@" 2>&1 | tee -a "$log"
}}
status=0
"""


def run_script(run: Run, settings: Settings, python: str) -> str:
    q = shlex.quote
    cache = ""
    if settings.jax_cache:
        cache = "\n".join(f"export {k}=${{{k}:-{q(v)}}}" for k, v in (
            ("JAX_COMPILATION_CACHE_DIR", settings.jax_cache),
            ("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0"),
            ("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")))
    plugins = "\n".join(f"export {k}=${{{k}:-{q(v)}}}" for k, v in plugin_variables().items())
    cache = "\n".join(part for part in (cache, plugins) if part)
    label = run.row.name if run.seed is None else f"{run.row.name} seed {run.seed}"
    lines = [SCRIPT_HEADER.format(label=label, repo=q(REPO), python=q(python), cache=cache)]
    for step, on_failure in ((run.pretrain, "exit 1"), *((s, "status=1") for s in run.glue)):
        command = " ".join(q(a) for a in step.argv)
        check = " ".join(q(a) for a in ("-m", "training.results", *step.target.cli_args()))
        if step is run.pretrain and run.row.pretrained_by:  # never two jobs on one workdir
            waiting = q(f"{label}: the pretraining of {run.row.pretrained_by} has not "
                        f"finished; run its run.sh first")
            lines.append(f"if ! \"$PYTHON\" {check}; then\n"
                         f"  echo {waiting} >&2\n  exit 1\nfi\n")
            continue
        lines.append(f"if ! \"$PYTHON\" {check}; then\n"
                     f"  run {q(step.log)} \"$PYTHON\" {command} || {on_failure}\n"
                     f"else\n  echo {q(f'[skip] {step.label}: finished')}\nfi\n")
    lines.append("exit $status\n")
    return "".join(lines)


def write_cluster(runs: list[Run], settings: Settings, python: str) -> str:
    """RUN/run.sh per run and OUT/launch_list.txt; returns the list's path."""
    paths = []
    for run in runs:
        path = os.path.join(run.directory, results.RUN_SCRIPT)
        write_text_atomic(path, run_script(run, settings, python))
        os.chmod(path, 0o755)
        paths.append(path)
    list_path = os.path.join(settings.out, results.LAUNCH_LIST)
    write_text_atomic(list_path, "".join(f"{p}\n" for p in paths))
    return list_path


# -- manifest and dry run ----------------------------------------------------------------
def write_manifest(label: str, rows: list[grids.Row], settings: Settings) -> None:
    """OUT/sweep.json: what tables.py needs to know about the rows. Rows from an
    earlier invocation are kept, so a grid can be extended by later sweeps."""
    manifest = results.SweepManifest(
        grid=label, rows=[sweep_grids.row_to_json(r) for r in rows],
        seeds=sorted(s for s in settings.seeds if s is not None),
        glue_tasks=list(settings.glue_tasks), pretrain_args=settings.pretrain_args,
        pretrain_overrides=list(settings.pretrain_overrides), glue_args=settings.glue_args,
        glue_overrides=list(settings.glue_overrides), glue_dir=settings.glue_dir)
    old = results.read_quietly(results.SweepManifest, settings.out)
    manifest.merged_into(old).write(settings.out)


def print_stats(runs: list[Run], settings: Settings) -> None:
    """Parameters (at the papers' 30522 vocabulary and at the tokenizer's size this
    run will train) and forward FLOPs per token at the run's sequence length.

    Without the MLM head only the word embeddings (V x D) depend on the vocabulary,
    which saves tracing each model twice."""
    print("| row | L | D | heads | key | value | attention | params (vocab 30522) | paper | "
          "params (run vocab) | GFLOPs/token fwd |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        if run.seed not in (None, settings.seeds[0]):
            continue  # the model does not depend on the seed
        cfg, seq_len = run.model, run.seq_len
        at_paper, _ = sweep_grids.parameter_counts(cfg.replace(vocab_size=30522))
        at_run = at_paper + (run.run_vocab - 30522) * cfg.hidden_size
        flops = sweep_grids.flops_per_token(cfg, seq_len)
        paper = f"{run.row.reported['params_m']:.0f}M" if "params_m" in run.row.reported else "-"
        print(f"| {run.row.name} | {cfg.num_layers} | {cfg.hidden_size} | {cfg.num_heads} | "
              f"{cfg.head_key_size} | {cfg.head_value_size} | "
              f"{attention_label(cfg)} | {sweep_grids.millions(at_paper)} | {paper} | "
              f"{sweep_grids.millions(at_run)} "
              f"(vocab {run.run_vocab}) | {flops / 1e9:.4g} (n={seq_len}) |")


def attention_label(cfg: Any) -> str:
    from attention import registry  # the models are built by now; JAX is imported

    return registry.get(cfg.attention).label(cfg)


def print_commands(runs: list[Run], python: str) -> None:
    for run in runs:
        if run.row.pretrained_by:
            print(f"# {run.row.name}: fine-tunes {run.pretrain.label}")
        for step in (*(() if run.row.pretrained_by else (run.pretrain,)), *run.glue):
            print(f"# {step.label}\n{shlex.join([python, *step.argv])}")


# -- main --------------------------------------------------------------------------------
def select_rows(rows: list[grids.Row], names: list[str]) -> list[grids.Row]:
    """The rows named in `names` (all when empty), in the grid's order."""
    unknown = sorted(set(names) - {row.name for row in rows})
    if unknown:
        raise ValueError(f"--rows: {', '.join(unknown)} not in the grid "
                         f"({', '.join(row.name for row in rows)})")
    return [row for row in rows if not names or row.name in names]
