"""Test-set predictions in the format of GLUE's submission server.

One file per test split (CoLA.tsv, ..., MNLI-m.tsv, MNLI-mm.tsv; names in
tasks.py), header `index<TAB>prediction`, one row per test example keyed by
the test file's own index. Predictions are written as the label strings of
the task's files: ints for CoLA/SST-2/MRPC/QQP/WNLI, words for
MNLI/QNLI/RTE, scores (3 decimals, as in GLUE's STS-B files) for STS-B.
The server also wants AX.tsv (the diagnostic set, predicted by the MNLI
model), which this package does not produce.

The file is written atomically (common/files.py), so a crash never leaves a
half-written file under the final name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from common.files import write_text_atomic
from glue.tasks import GlueTask, get_task

HEADER = "index\tprediction"


def format_prediction(task: GlueTask, prediction: int | float) -> str:
    """One prediction as the submission server reads it."""
    if task.labels is None:
        value = float(prediction)
        if not math.isfinite(value):
            raise ValueError(f"{task.name} prediction {prediction!r} is not finite")
        return f"{value:.3f}"
    if isinstance(prediction, float | np.floating) or not 0 <= prediction < len(task.labels):
        raise ValueError(
            f"{task.name} prediction {prediction!r} is not a class id in [0, {len(task.labels)})"
        )
    return task.labels[int(prediction)]


def write_submission(
    task: str | GlueTask,
    split: str,
    guids: Sequence[str],
    predictions: Sequence[int | float] | np.ndarray,
    out_dir: str | os.PathLike[str],
) -> Path:
    """Writes `<out_dir>/<submission file>` for a test split; returns its path.

    guids: the test examples' `Example.guid`s (the file's index column);
    predictions: class ids (or STS-B scores) in the same order.
    """
    task = get_task(task)
    task.check_split(split)
    if split not in task.submission_files:
        raise ValueError(f"{task.name} split {split!r} is not a test split {task.test_splits}")
    predictions = np.asarray(predictions)
    if predictions.ndim != 1 or len(predictions) != len(guids):
        raise ValueError(
            f"{task.name}: {len(guids)} guids but predictions of shape {predictions.shape}"
        )
    if len(set(guids)) != len(guids):
        raise ValueError(f"{task.name}: guids are not unique")
    lines = [HEADER]
    lines += [
        f"{g}\t{format_prediction(task, p.item())}" for g, p in zip(guids, predictions, strict=True)
    ]

    path = Path(out_dir) / task.submission_files[split]
    write_text_atomic(path, "\n".join(lines) + "\n", newline="\n")
    return path
