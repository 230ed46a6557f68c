"""glue/report.py: eval_glue.py's results.md in the BERT table's layout."""

from __future__ import annotations

import glue
from glue import report
from training import results


def summary(task_name: str, scores: dict[int, float]) -> results.TaskSummary:
    task = glue.get_task(task_name)
    runs = [results.RunResult(task.name, 2e-5, seed, 10,
                              {s: dict.fromkeys(task.metric_names, v) for s in task.dev_splits},
                              v, 0.1) for seed, v in scores.items()]
    return results.TaskSummary.from_runs(task, runs)


def test_results_md_in_the_bert_tables_order_with_a_named_partial_average(tmp_path):
    suite = results.GlueResults("/runs/mh/pretrain@300", {
        "RTE": summary("rte", {0: 60.0, 1: 62.0}),
        "MNLI": summary("mnli", {0: 80.0, 1: 80.0}),
        "WNLI": summary("wnli", {0: 56.3}),
    })
    table = report.write_markdown(str(tmp_path), suite, "talking_heads (mini)")
    assert table.splitlines() == [
        "| model | MNLI-m | MNLI-mm | RTE | WNLI | Average of 3 tasks (not GLUE's) |",
        "|---|---|---|---|---|---|",
        "| talking_heads (mini) | 80.0 ± 0.0 | 80.0 ± 0.0 | 61.0 ± 1.4 | 56.3 ± 0.0 | 73.7 |"]
    assert (tmp_path / "results.md").read_text() == (
        "GLUE dev, mean ± std over seeds at the best learning rate; init "
        f"/runs/mh/pretrain@300\n\n{table}\n")


def test_all_tasks_give_the_glue_average_and_no_tasks_an_empty_table(tmp_path):
    suite = results.GlueResults("x@1", {glue.get_task(n).name: summary(n, {0: 70.0})
                                        for n in glue.TASKS})
    assert report.markdown_table(suite, "m").splitlines()[0].endswith("| WNLI | Average |")
    assert report.write_markdown(str(tmp_path), results.GlueResults("x@1"), "m") == ""
