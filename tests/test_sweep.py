"""scripts/sweep.py: dry run, cluster scripts and their finished checks, a real local sweep
(pretraining, GLUE, a row fine-tuning another row's checkpoint, skipping finished runs,
then scripts/tables.py over it). (tables.py on fabricated runs: test_tables.py; the
study scripts: test_study_scripts.py.)"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest
from helpers import run_script, tiny_run_args, write_run_corpus, write_sst2

import glue
from configs import grids
from training import results

pytestmark = pytest.mark.slow  # every test starts scripts/sweep.py; one is a real sweep


def test_dry_run_prints_the_papers_parameter_counts_and_commands_and_writes_nothing(tmp_path):
    out = tmp_path / "t2a"
    result = run_script("sweep.py", ["--grid=lowrank_table2a", f"--out={out}", "--dry_run",
                                     "--glue_tasks=mnli"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for row, params in zip(grids.GRIDS["lowrank_table2a"], ("167.4M", "192.6M", "217.8M",
                                                            "318.6M"), strict=True):
        line = next(x for x in lines if x.startswith(f"| {row.name} |"))
        assert f"| {params} | {row.reported['params_m']:.0f}M |" in line
    commands = [shlex.split(x) for x in lines if "train.py" in x or "eval_glue.py" in x]
    assert len(commands) == 8  # 4 rows x (pretraining + MNLI)
    assert commands[0][1:6] == ["train.py", "--config", "configs/pretrain.py:row=lowrank_2a_h8",
                                "--workdir", str(out / "lowrank_2a_h8" / "pretrain")]
    assert commands[1][1:4] == ["eval_glue.py", "--config", "configs/glue.py:task=MNLI"]
    assert f"--config.init_from={out / 'lowrank_2a_h8' / 'pretrain'}" in commands[1]
    assert not out.exists()
    # Jobs, not "steps" (it said "8 steps"), and which GLUE protocol the commands run.
    assert lines[0] == ("sweep lowrank_table2a: 4 rows x 1 seed(s) = 4 runs: 8 jobs (4 "
                        "pretraining, 4 GLUE fine-tuning, each over its learning rates and "
                        "seeds); GLUE: MNLI")
    assert lines[1].startswith("GLUE args: none given, so configs/glue.py's full protocol")


def test_a_cpu_grid_fine_tunes_with_its_own_protocol_unless_told_otherwise(tmp_path):
    """The printed GLUE commands of a CPU grid ran the papers' full protocol."""
    def glue_commands(extra):
        result = run_script("sweep.py", ["--grid=talking_heads_cpu", f"--out={tmp_path}",
                                         "--dry_run", "--glue_tasks=sst2", *extra])
        assert result.returncode == 0, result.stderr
        return [x for x in result.stdout.splitlines() if x.startswith(sys.executable)
                and "eval_glue.py" in x]

    protocol = grids.GLUE_PROTOCOLS["talking_heads_cpu"]
    assert all(f"configs/glue.py:task=SST-2,{protocol} " in x for x in glue_commands([]))
    given = glue_commands(["--glue_args=seeds=5"])
    assert given and all("configs/glue.py:task=SST-2,seeds=5 " in x for x in given)


def test_squad_is_a_fine_tuning_task_of_the_sweep(tmp_path):
    """--glue_tasks mnli,squad: one eval_squad.py per run into RUN/glue/SQuAD, with the
    GLUE args and then --squad_args, the SQuAD folder and the row's checkpoint."""
    out = tmp_path / "t2a"
    result = run_script("sweep.py", ["--grid=lowrank_table2a", f"--out={out}", "--dry_run",
                                     "--glue_tasks=mnli,squad", "--glue_args=seeds=2",
                                     "--squad_args=doc_stride=64",
                                     f"--squad_dir={tmp_path / 'squad'}"])
    assert result.returncode == 0, result.stderr
    squad = [shlex.split(x) for x in result.stdout.splitlines() if "eval_squad.py" in x]
    assert len(squad) == 4
    pretrain = out / "lowrank_2a_h8" / "pretrain"
    assert squad[0][1:] == [
        "eval_squad.py", "--config", "configs/squad.py:seeds=2,doc_stride=64", "--workdir",
        str(out / "lowrank_2a_h8" / "glue" / "SQuAD"), f"--config.init_from={pretrain}",
        f"--config.squad_dir={tmp_path / 'squad'}"]
    assert "GLUE: MNLI, SQuAD" in result.stdout.splitlines()[0]
    bad = run_script("sweep.py", ["--grid=lowrank_table2a", f"--out={out}", "--dry_run",
                                  "--glue_tasks=squad", "--squad_args=max_answer=x"])
    assert bad.returncode == 1 and bad.stderr.startswith("error: ")


def script_commands(path: str) -> list[list[str]]:
    """The commands of a run script: `run LOG "$PYTHON" ARGS... || ...` lines."""
    commands = []
    with open(path) as f:
        for line in f:
            if line.lstrip().startswith("run "):
                words = shlex.split(line)
                assert words[2] == "$PYTHON"
                commands.append(words[3:words.index("||")])
    return commands


def test_cluster_mode_writes_one_script_per_run_and_a_launch_list(tmp_path):
    out = tmp_path / "th"
    result = run_script("sweep.py", [
        "--grid=talking_heads_cpu", f"--out={out}", "--mode=cluster", "--seeds=0,1",
        "--glue_tasks=sst2,rte", "--pretrain_args=steps=10,batch=8",
        "--pretrain_overrides=data.corpus=/data/corpus", "--glue_args=seeds=2",
        "--glue_dir=/data/glue"])
    assert result.returncode == 0, result.stderr

    expected = [(row.name, seed) for seed in (0, 1) for row in grids.GRIDS["talking_heads_cpu"]]
    scripts = (out / "launch_list.txt").read_text().split()
    assert scripts == [str(out / name / f"seed{seed}" / "run.sh") for name, seed in expected]
    for script, (name, seed) in zip(scripts, expected, strict=True):
        assert os.access(script, os.X_OK)
        assert subprocess.run(["bash", "-n", script]).returncode == 0  # valid shell
        run = out / name / f"seed{seed}"
        pretrain, *glue_runs = script_commands(script)
        assert pretrain == [
            "train.py", "--config", f"configs/pretrain.py:row={name},steps=10,batch=8,seed={seed}",
            "--workdir", str(run / "pretrain"), "--config.data.corpus=/data/corpus",
            f"--config.data.cache_dir={out / 'data_cache'}"]
        assert [g[:5] for g in glue_runs] == [
            ["eval_glue.py", "--config", f"configs/glue.py:task={task},seeds=2", "--workdir",
             str(run / "glue" / task)] for task in ("SST-2", "RTE")]
        for g in glue_runs:
            assert g[5:] == [f"--config.init_from={run / 'pretrain'}",
                             "--config.glue_dir=/data/glue"]
        assert not (run / "pretrain").exists()  # cluster mode runs nothing
    manifest = json.loads((out / "sweep.json").read_text())
    assert [r["name"] for r in manifest["rows"]] == [r.name for r in
                                                     grids.GRIDS["talking_heads_cpu"]]
    assert manifest["seeds"] == [0, 1] and manifest["glue_tasks"] == ["SST-2", "RTE"]


FAKE_PYTHON = """#!/usr/bin/env bash
# The finished checks (python -m training.results) run for real; every other command
# is recorded instead of run.
if [ "$1" = "-m" ]; then exec {python} "$@"; fi
echo "$1" >> {calls}
"""


def test_cluster_run_script_reruns_stale_steps_and_skips_finished_ones(tmp_path):
    """run.sh decides "finished" as a local sweep does, not by the files' existence."""
    (tmp_path / "grid.py").write_text('GRID = [{"name": "mh", "overrides": {"size": "micro"}}]\n')
    out = tmp_path / "out"
    result = run_script("sweep.py", [
        f"--grid_file={tmp_path / 'grid.py'}", f"--out={out}", "--mode=cluster",
        "--pretrain_args=steps=10", "--glue_tasks=sst2", "--glue_args=seeds=2,lr=2e-5",
        "--glue_dir=/data/glue", "--jax_cache=none"])
    assert result.returncode == 0, result.stderr
    calls = tmp_path / "calls.txt"
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.format(python=shlex.quote(sys.executable),
                                         calls=shlex.quote(str(calls))))
    python.chmod(0o755)
    pretrain, glue_dir = out / "mh" / "pretrain", out / "mh" / "glue" / "SST-2"
    task = glue.get_task("sst2")

    def glue_results(seeds: list[int]) -> None:
        runs = [results.RunResult("SST-2", 2e-5, s, 10, {"dev": {"accuracy": 80.0}}, 80.0, 0.5)
                for s in seeds]
        results.FineTuningResults(f"{pretrain}@10",
                            {"SST-2": results.TaskSummary.from_runs(task, runs)}).write(
                                str(glue_dir))
        for r in runs:  # each run's own record, as eval_glue.py leaves them
            r.write(str(glue_dir / "SST-2" / results.run_name(r.learning_rate, r.seed)))

    def run_sh() -> list[str]:
        calls.unlink(missing_ok=True)
        done = subprocess.run(["bash", str(out / "mh" / "run.sh")], capture_output=True,
                              text=True, env=dict(os.environ, PYTHON=str(python)), timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return calls.read_text().split() if calls.exists() else []

    # Stale: pretrained for 5 of 10 steps; fine-tuned with 1 of 2 seeds.
    results.FinalMetrics(step=5, train_loss=1.0).write(str(pretrain))
    glue_results([0])
    assert run_sh() == ["train.py", "eval_glue.py"]
    # Finished: both are skipped.
    results.FinalMetrics(step=10, train_loss=1.0).write(str(pretrain))
    (pretrain / "checkpoints" / "10").mkdir(parents=True)  # the checkpoint it reports
    glue_results([0, 1])
    assert run_sh() == []


def test_bad_grid_file_is_one_clear_error_before_anything_runs(tmp_path):
    grid = tmp_path / "grid.py"
    grid.write_text('GRID = [{"name": "a", "overrides": {"size": "micro", "hedas": 2}}]\n')
    result = run_script("sweep.py", [f"--grid_file={grid}", f"--out={tmp_path / 'out'}"])
    assert result.returncode != 0
    assert "row a: unknown override(s) ['hedas']" in result.stderr
    assert not (tmp_path / "out").exists()


GRID_FILE = """\
from configs.grids import Row

GRID = [
    {"name": "mh", "overrides": {"size": "micro"}},
    # key_size 16 is micro's default d/h: the same programs, which the sweep's shared
    # compilation cache serves, keeping the test fast.
    Row("ks16", {"size": "micro", "key_size": 16}),
    # Fails in train.py (sequence 32 > 16 positions): the sweep must go on without it.
    {"name": "broken", "overrides": {"size": "micro", "max_len": 16}},
    # Fine-tunes mh's checkpoint as talking heads inserted at identity: no pretraining
    # of its own (the sweep waits for mh's), its own GLUE folder.
    {"name": "mh_th", "overrides": {"size": "micro"}, "glue": {"insert_th": True},
     "pretrained_by": "mh"},
]
"""


def test_local_sweep_runs_rows_end_to_end_then_skips_finished_runs(tmp_path):
    corpus = write_run_corpus(str(tmp_path), sst2_words=True)  # the tokenizer knows SST-2
    write_sst2(str(tmp_path / "glue" / "SST-2"), np.random.default_rng(0))
    (tmp_path / "grid.py").write_text(GRID_FILE)
    out = tmp_path / "sweep"
    # Compiling dominates these tiny runs: the session's compilation cache (conftest)
    # holds the programs other tests' runs compiled (the sweep's own default,
    # OUT/jax_cache, would start empty every time).
    jax_cache = os.environ.get("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax_cache"))
    pretrain = tiny_run_args(corpus, str(tmp_path / "cache"), steps=6, log_every_steps=3,
                             eval_every_steps=6, checkpoint_every_steps=6, eval_batches=1)
    args = [f"--grid_file={tmp_path / 'grid.py'}", f"--out={out}", "--glue_tasks=sst2",
            f"--glue_dir={tmp_path / 'glue'}",
            # One fine-tuning step: finetune.py compiles its train step twice when it takes more.
            "--glue_args=seeds=1,lr=2e-3,batch=64,seq_len=16,max_train=64,epochs=1",
            "--glue_overrides=write_test_predictions=false", f"--jax_cache={jax_cache}",
            *(f"--pretrain_overrides={a.removeprefix('--config.')}" for a in pretrain
              if not a.startswith("--config.model.")),  # the rows set the model
            ]

    first = run_script("sweep.py", args)
    assert first.returncode == 1, first.stdout + first.stderr  # the broken row failed
    broken_log = out / "broken" / "pretrain" / "train.log"
    assert "[FAIL] broken pretrain: exit 1" in first.stdout and str(broken_log) in first.stdout
    assert "exceeds model.max_position_embeddings=16" in broken_log.read_text()
    assert "not run: broken glue SST-2 (pretraining failed)" in first.stdout
    assert "[skip] mh_th pretrain: shared with mh" in first.stdout
    assert not (out / "mh_th" / "pretrain").exists()
    inserted = json.loads((out / "mh_th" / "glue" / "SST-2" / "results.json").read_text())
    assert inserted["init"] == (f"talking heads inserted at identity: "
                                f"{out / 'mh' / 'pretrain'}@6")
    logs = []
    for row in ("mh", "ks16"):
        final = json.loads((out / row / "pretrain" / "final_metrics.json").read_text())
        assert final["step"] == 6 and math.isfinite(final["eval_loss"])
        results = json.loads((out / row / "glue" / "SST-2" / "results.json").read_text())
        assert results["tasks"]["SST-2"]["seeds"] == [0]
        assert results["init"] == f"{out / row / 'pretrain'}@6"
        logs += [out / row / "pretrain" / "train.log",
                 out / row / "glue" / "SST-2" / "eval_glue.log"]
    assert all(log.stat().st_size > 0 for log in logs)
    before = [(log.stat().st_mtime_ns, log.stat().st_size) for log in logs]

    second = run_script("sweep.py", args)
    assert second.returncode == 1
    for label in ("mh pretrain", "mh glue SST-2", "ks16 pretrain", "ks16 glue SST-2"):
        assert f"[skip] {label}: finished" in second.stdout
    assert "[skip] mh_th glue SST-2: finished" in second.stdout
    assert "sweep: 0 finished, 6 skipped, 1 failed, 1 not run" in second.stdout
    assert [(log.stat().st_mtime_ns, log.stat().st_size) for log in logs] == before

    tables = run_script("tables.py", [f"--out={out}"])
    assert tables.returncode == 0, tables.stderr
    row = next(x for x in tables.stdout.splitlines() if x.startswith("| ks16 |"))
    assert "| multi_head | 2 | 16 | 16 |" in row
    score = json.loads((out / "ks16" / "glue" / "SST-2" / "results.json").read_text())
    assert f"| {score['tasks']['SST-2']['main']['SST-2']:.1f} |" in row
    row = next(x for x in tables.stdout.splitlines() if x.startswith("| mh_th |"))
    mlm = json.loads((out / "mh" / "pretrain" / "final_metrics.json").read_text())
    assert "| insert_th=True; checkpoint of mh |" in row  # mh's pretraining, its own GLUE
    assert f"| {mlm['eval_loss']:.3f} |" in row
    score = json.loads((out / "mh_th" / "glue" / "SST-2" / "results.json").read_text())
    assert f"| {score['tasks']['SST-2']['main']['SST-2']:.1f} |" in row
