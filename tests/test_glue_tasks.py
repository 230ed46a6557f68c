"""glue/tasks.py: the nine tasks, their splits, labels, metrics and submission files."""

from __future__ import annotations

import pytest

import glue


def test_registry_covers_nine_tasks_and_their_submission_files():
    assert list(glue.TASKS) == [
        "CoLA",
        "SST-2",
        "MRPC",
        "STS-B",
        "QQP",
        "MNLI",
        "QNLI",
        "RTE",
        "WNLI",
    ]
    files = sorted(f for t in glue.TASKS.values() for f in t.submission_files.values())
    assert files == sorted(
        [
            "CoLA.tsv",
            "SST-2.tsv",
            "MRPC.tsv",
            "STS-B.tsv",
            "QQP.tsv",
            "MNLI-m.tsv",
            "MNLI-mm.tsv",
            "QNLI.tsv",
            "RTE.tsv",
            "WNLI.tsv",
        ]
    )
    assert glue.get_task("sst2") is glue.get_task("SST-2") is glue.get_task("sst_2")
    assert glue.get_task("stsb").is_regression and glue.get_task("stsb").num_labels == 1
    assert glue.get_task("mnli").num_labels == 3
    assert glue.get_task("mnli").dev_splits == ("dev_matched", "dev_mismatched")
    assert glue.get_task("cola").is_pair is False and glue.get_task("rte").is_pair
    for task in glue.TASKS.values():
        assert set(task.split_files) == set(task.hub_splits) == set(task.official_sizes)
        assert set(task.submission_files) == set(task.test_splits)
        assert task.main_metric in task.metric_names
        if task.labels is not None:
            assert len(task.labels) == len(task.hub_label_names)
    with pytest.raises(ValueError, match="unknown GLUE task 'squad'"):
        glue.get_task("squad")
