"""GLUE data and metrics: task registry, TSV and hub readers, encoding, metrics, submissions
(results.md's table is tasks/glue_report.py's; the fine-tuning task is tasks/glue_tasks.py).

Data flow: task -> examples (`read_split` from the GLUE TSV folder
or `load_hub_split` from the Hugging Face hub) -> `encode_examples` -> model ->
`compute_metrics` / `write_submission`.

    task = glue.get_task("mrpc")
    dev = glue.load_split(task, "dev", data_dir="glue_data")  # data_dir=None: hub
    batch = glue.encode_examples(tokenizer, dev, 128, task)
    glue.compute_metrics(task, predicted_ids, batch["labels"])  # {'f1': .., 'accuracy': ..}
"""

from __future__ import annotations

import os

from glue.encode import encode_examples, truncate_pair
from glue.hub import examples_from_hub, load_hub_split
from glue.metrics import (
    compute_metrics,
    glue_average,
    main_score,
    majority_baseline,
    score_name,
)
from glue.readers import read_split, read_tsv, split_path
from glue.submission import write_submission
from glue.tasks import (
    TASKS,
    Example,
    GlueDataError,
    GlueTask,
    get_task,
    is_labeled,
    is_task,
    task_keys,
)

__all__ = [
    "TASKS",
    "Example",
    "GlueDataError",
    "GlueTask",
    "compute_metrics",
    "encode_examples",
    "examples_from_hub",
    "get_task",
    "is_task",
    "task_keys",
    "glue_average",
    "is_labeled",
    "load_hub_split",
    "load_split",
    "main_score",
    "majority_baseline",
    "read_split",
    "read_tsv",
    "score_name",
    "split_path",
    "truncate_pair",
    "write_submission",
]


def load_split(
    task: str | GlueTask, split: str, data_dir: str | os.PathLike[str] | None = None
) -> list[Example]:
    """Examples of one split: from the GLUE TSV folder `data_dir`, or the hub when None."""
    if data_dir is None:
        return load_hub_split(task, split)
    return read_split(task, data_dir, split)
