"""training/results.py: the result files' records, old files, the finished checks and
their command line (what cluster run.sh scripts call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO

import glue
from training import results


def run(task: str, lr: float, seed: int, score: float) -> results.RunResult:
    t = glue.get_task(task)
    dev = {split: dict.fromkeys(t.metric_names, score) for split in t.dev_splits}
    return results.RunResult(t.name, lr, seed, 10, dev, score, 0.25)


def test_task_summary_picks_the_best_mean_learning_rate_in_results_json_format():
    runs = [run("mrpc", 2e-5, 1, 70.0), run("mrpc", 2e-5, 0, 74.0),
            run("mrpc", 3e-5, 0, 80.0), run("mrpc", 3e-5, 1, 60.0)]
    summary = results.TaskSummary.from_runs(glue.get_task("mrpc"), runs)
    assert summary.to_json() == {
        "task": "MRPC", "best_learning_rate": 2e-5, "seeds": [0, 1],
        "scores": {"MRPC/f1": {"mean": 72.0, "std": pytest.approx(2.8284271), "per_seed":
                               [74.0, 70.0]},
                   "MRPC/accuracy": {"mean": 72.0, "std": pytest.approx(2.8284271),
                                     "per_seed": [74.0, 70.0]}},
        "main": {"MRPC": 72.0}, "learning_rate_means": {"2e-05": 72.0, "3e-05": 70.0},
        "best_run": 0, "majority": {}}
    assert summary.main_per_seed() == {"MRPC": {0: 74.0, 1: 70.0}}
    one = results.TaskSummary.from_runs(glue.get_task("mnli"), [run("mnli", 2e-5, 0, 80.0)])
    assert one.main_score("MNLI-mm") == results.Score(80.0, 0.0, [80.0])


def test_records_round_trip_through_their_files(tmp_path):
    summary = results.TaskSummary.from_runs(glue.get_task("rte"), [run("rte", 2e-5, 0, 60.0)])
    suite = results.FineTuningResults("/runs/a/pretrain@40", {"RTE": summary}, {"CoLA": "bad tsv"},
                                {"RTE": "test.tsv is missing"})
    suite.write(str(tmp_path))
    assert results.FineTuningResults.read(str(tmp_path)) == suite
    assert suite.init_step() == 40
    assert results.FineTuningResults("hf:bert-base-uncased").init_step() is None
    final = results.FinalMetrics(300, 5.7, {"eval_loss": 6.2, "eval_accuracy": 0.12})
    final.write(str(tmp_path))
    assert list(json.loads((tmp_path / "final_metrics.json").read_text())) == [
        "step", "eval_loss", "eval_accuracy", "train_loss", "skipped_nonfinite"]
    assert results.FinalMetrics.read(str(tmp_path)) == final
    assert final.metric("eval_loss") == 6.2 and final.metric("train_loss") == 5.7
    r = run("sst2", 3e-5, 1, 90.0)
    r.write(str(tmp_path / "lr3e-05_seed1"))
    assert results.RunResult.read(str(tmp_path / "lr3e-05_seed1")) == r


def test_old_files_read_with_empty_fields_and_damaged_ones_name_the_file(tmp_path):
    # Before 2026-12: final_metrics.json without train_loss (and, earliest, without step);
    # results.json without skipped or no_submission.
    (tmp_path / "final_metrics.json").write_text('{"eval_loss": 3.0, "eval_accuracy": 0.4}')
    old = results.FinalMetrics.read(str(tmp_path))
    assert old == results.FinalMetrics(None, None, {"eval_loss": 3.0, "eval_accuracy": 0.4})
    summary = results.TaskSummary.from_runs(glue.get_task("rte"), [run("rte", 2e-5, 0, 60.0)])
    (tmp_path / "results.json").write_text(json.dumps(
        {"init": "/p@5", "tasks": {"RTE": summary.to_json()}}))
    suite = results.FineTuningResults.read(str(tmp_path))
    assert suite.tasks == {"RTE": summary} and suite.skipped == suite.no_submission == {}

    assert results.RunResult.read(str(tmp_path / "nothing")) is None
    (tmp_path / "results.json").write_text('{"init": "/p@5", "tasks": {"RTE": {"tas')
    with pytest.raises(results.ResultsError, match="results.json"):
        results.FineTuningResults.read(str(tmp_path))
    assert results.read_quietly(results.FineTuningResults, str(tmp_path)) is None


def test_finished_checks_want_the_step_seeds_learning_rates_and_checkpoint(tmp_path):
    pretrain = results.PretrainTarget(str(tmp_path / "p"), steps=10)
    assert not pretrain.finished()
    results.FinalMetrics(5, 1.0).write(pretrain.workdir)
    assert not pretrain.finished()  # stale: fewer steps than asked
    results.FinalMetrics(10, 1.0).write(pretrain.workdir)
    assert not pretrain.finished()  # the checkpoint it reports is not there
    os.makedirs(os.path.join(pretrain.workdir, "checkpoints", "10"))
    assert pretrain.finished()

    target = results.GlueTarget(str(tmp_path / "g"), "RTE", 10, (2e-5, 3e-5), num_seeds=2)

    def write(init: str, runs: list[results.RunResult]) -> None:
        summary = results.TaskSummary.from_runs(glue.get_task("rte"), runs)
        results.FineTuningResults(init, {"RTE": summary}).write(target.workdir)

    both = [run("rte", lr, s, 60.0) for lr in (2e-5, 3e-5) for s in (0, 1)]
    write(f"{tmp_path}/p@10", [run("rte", lr, 0, 60.0) for lr in (2e-5, 3e-5)])
    assert not target.finished()  # fewer seeds
    write(f"{tmp_path}/p@10", [run("rte", 2e-5, s, 60.0) for s in (0, 1)])
    assert not target.finished()  # a learning rate is missing
    write(f"{tmp_path}/p@5", both)
    assert not target.finished()  # another checkpoint
    write(f"{tmp_path}/p@10", both)
    assert not target.finished()  # the runs' own result.json files are not there
    for r in both:
        r.write(os.path.join(target.workdir, "RTE", results.run_name(r.learning_rate,
                                                                          r.seed)))
    assert target.finished()
    os.remove(os.path.join(target.workdir, "RTE", "lr3e-05_seed1", "result.json"))
    assert not target.finished()  # a run deleted by hand: eval_glue.py redoes it
    both[-1].write(os.path.join(target.workdir, "RTE", "lr3e-05_seed1"))
    (tmp_path / "g" / "results.json").write_text("{")
    assert not target.finished()  # damaged: rerun


@pytest.mark.slow
def test_the_command_line_decides_as_the_records_do(tmp_path):
    targets = [results.PretrainTarget(str(tmp_path / "p"), 10),
               results.GlueTarget(str(tmp_path / "g"), "MNLI", 10, (5e-5, 2e-5, 1 / 3), 3)]
    for target in targets:
        assert results.target_from_args(target.cli_args()) == target  # exact round trip

    def cli(target) -> int:
        return subprocess.run([sys.executable, "-m", "training.results", *target.cli_args()],
                              cwd=REPO, capture_output=True, timeout=60).returncode

    assert cli(targets[0]) == 1
    results.FinalMetrics(10, 1.0).write(targets[0].workdir)
    os.makedirs(os.path.join(targets[0].workdir, "checkpoints", "10"))
    assert cli(targets[0]) == 0
    bad = subprocess.run([sys.executable, "-m", "training.results", "--is_finished", "x"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--steps" in bad.stderr


def test_manifest_keeps_earlier_rows_seeds_and_tasks(tmp_path):
    first = results.SweepManifest("g", [{"name": "a", "overrides": {}, "reported": {}}],
                                  seeds=[1], glue_tasks=["RTE"], pretrain_args="steps=5")
    first.write(str(tmp_path))
    second = results.SweepManifest("g", [{"name": "b", "overrides": {"heads": 2},
                                          "reported": {}}], seeds=[0], glue_tasks=["SST-2"])
    merged = second.merged_into(results.SweepManifest.read(str(tmp_path)))
    assert [r["name"] for r in merged.rows] == ["a", "b"]
    assert merged.seeds == [0, 1] and merged.glue_tasks == ["RTE", "SST-2"]
    assert merged.pretrain_args == ""  # the latest sweep's arguments


def test_run_layout_with_and_without_seed_folders(tmp_path):
    out = str(tmp_path)
    assert results.run_dir(out, "mh", None) == os.path.join(out, "mh")
    assert results.run_dir(out, "mh", 2) == os.path.join(out, "mh", "seed2")
    os.makedirs(results.pretrain_dir(results.run_dir(out, "mh", 2)))
    os.makedirs(results.glue_dir(results.run_dir(out, "mh", 0), "RTE"))
    assert results.list_runs(out, "mh") == [(0, os.path.join(out, "mh", "seed0")),
                                            (2, os.path.join(out, "mh", "seed2"))]
    assert results.list_runs(out, "other") == []
