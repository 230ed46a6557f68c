"""GLUE metrics (scikit-learn / scipy) and the BERT paper's GLUE average.

All scores are percentages (x100), as in the papers' tables.

Main score per task = the number in the BERT paper's GLUE table (Devlin et
al. 2019, Table 1): Matthews correlation for CoLA, F1 for MRPC and QQP,
Spearman for STS-B, accuracy for the rest. MNLI's matched and mismatched
accuracies are two separate entries ("MNLI-m", "MNLI-mm"; see `score_name`).

GLUE average (`glue_average`): the paper's "Average" column is the plain mean
of its 9 columns, MNLI-m and MNLI-mm each counted once, WNLI excluded (the
paper calls it problematic). This reproduces the paper: BERT-base 79.6,
BERT-large 82.1 (checked in tests). It is *not* the GLUE leaderboard's
score, which averages F1/accuracy for MRPC and QQP, Pearson/Spearman for
STS-B, m/mm for MNLI, and includes WNLI.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from glue.tasks import GlueTask, get_task

# The 9 entries of the BERT paper's GLUE average, in the paper's column order.
BERT_AVERAGE_ENTRIES = ("MNLI-m", "MNLI-mm", "QQP", "QNLI", "SST-2", "CoLA", "STS-B", "MRPC", "RTE")


def compute_metrics(
    task: str | GlueTask, predictions: np.ndarray, labels: np.ndarray
) -> dict[str, float]:
    """The task's metrics (names in `GlueTask.metric_names`) as percentages.

    predictions: class ids [N] or logits [N, C] (argmax is taken); STS-B:
    scores [N] (or [N, 1]). labels: class ids [N] / scores [N].
    """
    task = get_task(task)
    predictions = np.asarray(predictions)
    labels = np.asarray(labels)
    if task.is_regression:
        predictions = predictions.reshape(predictions.shape[0], -1)
        if predictions.shape[1] != 1:
            raise ValueError(f"STS-B predictions must be [N] or [N, 1], got {predictions.shape}")
        predictions = predictions[:, 0].astype(np.float64)
        labels = labels.astype(np.float64)
    else:
        if predictions.ndim == 2:
            predictions = predictions.argmax(axis=-1)
        _check_ids(task, labels, "labels")
        _check_ids(task, predictions, "predictions")
    if predictions.shape != labels.shape or labels.ndim != 1 or len(labels) == 0:
        raise ValueError(
            f"{task.name}: predictions {predictions.shape} and labels {labels.shape} must be "
            "the same non-empty [N]"
        )

    # scikit-learn and scipy.stats are imported where a score is computed: together they
    # cost over a second at every start of eval_glue.py and of the scripts that import
    # glue, most of which never score anything.
    from sklearn import metrics as skm

    out: dict[str, float] = {}
    for name in task.metric_names:
        if name == "accuracy":
            value = skm.accuracy_score(labels, predictions)
        elif name == "f1":
            # Binary F1 of the positive class (1: equivalent / duplicate), as GLUE scores it.
            value = skm.f1_score(labels, predictions, pos_label=1, average="binary")
        elif name == "mcc":
            value = skm.matthews_corrcoef(labels, predictions)
        elif name in ("pearson", "spearman"):
            value = _correlation(name, predictions, labels)
        else:
            raise AssertionError(f"metric {name!r} has no implementation")
        out[name] = 100.0 * float(value)
    return out


def _correlation(name: str, predictions: np.ndarray, labels: np.ndarray) -> float:
    """Pearson or Spearman; 0 when undefined (constant predictions or labels, as a
    collapsed regression head gives), as scikit-learn's MCC scores a constant classifier,
    so no NaN reaches a result file."""
    if np.ptp(predictions) == 0 or np.ptp(labels) == 0:
        return 0.0
    import scipy.stats  # only STS-B needs it (see compute_metrics)

    test = scipy.stats.pearsonr if name == "pearson" else scipy.stats.spearmanr
    return float(test(predictions, labels).statistic)


def _check_ids(task: GlueTask, ids: np.ndarray, what: str) -> None:
    if ids.size and (
        not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= task.num_labels
    ):
        raise ValueError(
            f"{task.name}: {what} must be class ids in [0, {task.num_labels}); missing "
            "labels (-1, test splits) cannot be scored"
        )


def majority_baseline(task: str | GlueTask, train_labels: np.ndarray,
                      dev_labels: np.ndarray) -> float:
    """The main dev score of a model that ignores its input: always the most frequent
    training label (scikit-learn's DummyClassifier), or for STS-B the training mean
    (DummyRegressor: no correlation, 0). A fine-tuned score at or below it learned
    nothing that shows on dev."""
    from sklearn.dummy import DummyClassifier, DummyRegressor

    task = get_task(task)
    dummy = DummyRegressor() if task.is_regression else DummyClassifier(strategy="most_frequent")
    dummy.fit(np.zeros((len(train_labels), 1)), train_labels)
    predictions = dummy.predict(np.zeros((len(dev_labels), 1)))
    return main_score(task, compute_metrics(task, predictions, dev_labels))


def main_score(task: str | GlueTask, metrics: Mapping[str, float]) -> float:
    """The task's headline number (see the module docstring) from `compute_metrics` output."""
    return metrics[get_task(task).main_metric]


def score_name(task: str | GlueTask, split: str) -> str:
    """Column name of a result in the BERT table: the task name, 'MNLI-m' or 'MNLI-mm'."""
    task = get_task(task)
    task.check_split(split)
    if split.endswith("_mismatched"):
        return f"{task.name}-mm"
    if split.endswith("_matched"):
        return f"{task.name}-m"
    return task.name


def glue_average(scores: Mapping[str, float]) -> float:
    """The BERT paper's GLUE average of the 9 `BERT_AVERAGE_ENTRIES` main scores.

    Keys are `score_name`s; other keys (e.g. "WNLI") are ignored, missing ones
    are an error rather than a silently different average.
    """
    missing = [k for k in BERT_AVERAGE_ENTRIES if k not in scores]
    if missing:
        raise ValueError(f"GLUE average needs main scores for {missing} as well")
    return float(np.mean([scores[k] for k in BERT_AVERAGE_ENTRIES]))
