"""tasks/glue_report.py: eval_glue.py's results.md in the BERT table's layout."""

from __future__ import annotations

import pytest

import glue
from tasks import glue_report as report
from training import results


def summary(task_name: str, scores: dict[int, float],
            majority: float | None = None) -> results.TaskSummary:
    task = glue.get_task(task_name)
    runs = [results.RunResult(task.name, 2e-5, seed, 10,
                              {s: dict.fromkeys(task.metric_names, v) for s in task.dev_splits},
                              v, 0.1) for seed, v in scores.items()]
    baseline = None if majority is None else {
        glue.score_name(task, s): majority for s in task.dev_splits}
    return results.TaskSummary.from_runs(task, runs, baseline)


def test_results_md_in_the_bert_tables_order_with_a_named_partial_average(tmp_path):
    """One seed shows no "± 0.0"; a score at or below the majority class is marked."""
    suite = results.FineTuningResults("/runs/mh/pretrain@300", {
        "RTE": summary("rte", {0: 60.0, 1: 62.0}, majority=52.7),
        "MNLI": summary("mnli", {0: 80.0, 1: 80.0}, majority=35.4),
        "WNLI": summary("wnli", {0: 56.3}, majority=56.3),
    })
    table = report.write_markdown(str(tmp_path), suite, "talking_heads (mini)")
    assert table.splitlines() == [
        "| model | MNLI-m | MNLI-mm | RTE | WNLI | Average of 3 tasks (not GLUE's) |",
        "|---|---|---|---|---|---|",
        "| talking_heads (mini) | 80.0 ± 0.0 | 80.0 ± 0.0 | 61.0 ± 1.4 | 56.3 † | 73.7 |",
        "",
        "One fine-tuning seed (no spread): WNLI.",
        "†: at or below the majority-class baseline (always the most frequent training "
        "label; STS-B: the training mean): WNLI 56.3 <= 56.3."]
    assert (tmp_path / "results.md").read_text() == (
        "GLUE dev, mean ± std over seeds at the best learning rate; init "
        f"/runs/mh/pretrain@300\n\n{table}\n")


def test_all_tasks_give_the_glue_average_and_no_tasks_an_empty_table(tmp_path):
    suite = results.FineTuningResults("x@1", {glue.get_task(n).name: summary(n, {0: 70.0})
                                        for n in glue.TASKS})
    assert report.markdown_table(suite, "m").splitlines()[0].endswith("| WNLI | Average |")
    assert report.write_markdown(str(tmp_path), results.FineTuningResults("x@1"), "m") == ""


def test_the_majority_baseline_is_scikit_learns_dummy_model():
    """Always the most frequent training label (ties: the smallest id), scored by the
    task's main metric; a constant regression has no correlation."""
    assert glue.majority_baseline("sst2", [1, 1, 0], [1, 0, 0, 0]) == 25.0
    assert glue.majority_baseline("rte", [0, 1], [1, 0, 0]) == pytest.approx(200 / 3)  # tie: 0
    assert glue.majority_baseline("cola", [1, 1, 0], [1, 0, 1]) == 0.0  # MCC of a constant
    assert glue.majority_baseline("stsb", [1.0, 2.0], [0.5, 3.0, 1.0]) == 0.0
    old = summary("sst2", {0: 50.0}).to_json()
    del old["majority"]  # a results.json from before the baseline was recorded
    assert not results.TaskSummary.from_json(old).at_or_below_majority("SST-2")
