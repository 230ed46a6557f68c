"""glue/metrics.py: each task's official metrics, hand-checked and against independent
computations (numpy, scikit-learn, scipy); the GLUE average of the BERT paper."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
from sklearn import metrics as skm

import glue


def test_metrics_hand_checked():
    # TP=1, FP=1, TN=2, FN=0.
    preds, labels = np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0])
    assert glue.compute_metrics("cola", preds, labels) == {
        "mcc": pytest.approx(100 * 2 / math.sqrt(12))
    }
    assert glue.compute_metrics("mrpc", preds, labels) == {
        "f1": pytest.approx(100 * 2 / 3),
        "accuracy": pytest.approx(75.0),
    }
    # Pearson of (1, 2, 3) and (1, 2, 4) = 3 / sqrt(2 * 42/9); ranks agree exactly.
    sts = glue.compute_metrics("stsb", np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]))
    assert sts == {
        "pearson": pytest.approx(100 * 3 / math.sqrt(2 * 42 / 9)),
        "spearman": pytest.approx(100.0),
    }
    # Logits are argmaxed: predictions 0, 2, 1 against 0, 2, 2.
    logits = np.array([[3.0, 1.0, 0.0], [0.0, 1.0, 2.0], [0.0, 5.0, 1.0]])
    assert glue.compute_metrics("mnli", logits, np.array([0, 2, 2])) == {
        "accuracy": pytest.approx(200 / 3)
    }


def _numpy_mcc(p: np.ndarray, y: np.ndarray) -> float:
    tp, tn = np.sum((p == 1) & (y == 1)), np.sum((p == 0) & (y == 0))
    fp, fn = np.sum((p == 1) & (y == 0)), np.sum((p == 0) & (y == 1))
    return (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))


def test_metrics_agree_with_independent_computations():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    p = np.where(rng.random(500) < 0.7, y, 1 - y)
    cola = glue.compute_metrics("cola", p, y)
    assert cola["mcc"] == pytest.approx(100 * _numpy_mcc(p, y))
    assert cola["mcc"] == pytest.approx(100 * skm.matthews_corrcoef(y, p))
    qqp = glue.compute_metrics("qqp", p, y)
    tp = np.sum((p == 1) & (y == 1))
    assert qqp["f1"] == pytest.approx(100 * 2 * tp / (np.sum(p == 1) + np.sum(y == 1)))
    assert qqp["accuracy"] == pytest.approx(100 * np.mean(p == y))

    y3, p3 = rng.integers(0, 3, 300), rng.integers(0, 3, 300)
    assert glue.compute_metrics("mnli", p3, y3)["accuracy"] == pytest.approx(
        100 * skm.accuracy_score(y3, p3)
    )

    scores = rng.uniform(0, 5, 400)
    noisy = scores + rng.normal(0, 1.0, 400)
    sts = glue.compute_metrics("stsb", noisy[:, None], scores)  # [N, 1] head output
    assert sts["pearson"] == pytest.approx(100 * np.corrcoef(noisy, scores)[0, 1])
    ranks = [np.argsort(np.argsort(v)) for v in (noisy, scores)]  # no ties in floats
    assert sts["spearman"] == pytest.approx(100 * np.corrcoef(*ranks)[0, 1])
    assert sts["spearman"] == pytest.approx(100 * scipy.stats.spearmanr(noisy, scores)[0])


def test_metrics_reject_missing_labels_and_shape_mismatch():
    with pytest.raises(ValueError, match="class ids"):
        glue.compute_metrics("rte", np.array([0, 1]), np.array([0, -1]))
    with pytest.raises(ValueError, match="same non-empty"):
        glue.compute_metrics("rte", np.array([0, 1, 1]), np.array([0, 1]))


def test_glue_average_reproduces_bert_paper():
    # BERT paper Table 1 (test), main scores; Average column 79.6 (base), 82.1 (large).
    base = {
        "MNLI-m": 84.6,
        "MNLI-mm": 83.4,
        "QQP": 71.2,
        "QNLI": 90.5,
        "SST-2": 93.5,
        "CoLA": 52.1,
        "STS-B": 85.8,
        "MRPC": 88.9,
        "RTE": 66.4,
        "WNLI": 65.1,
    }
    large = {
        "MNLI-m": 86.7,
        "MNLI-mm": 85.9,
        "QQP": 72.1,
        "QNLI": 92.7,
        "SST-2": 94.9,
        "CoLA": 60.5,
        "STS-B": 86.5,
        "MRPC": 89.3,
        "RTE": 70.1,
    }
    assert round(glue.glue_average(base), 1) == 79.6
    assert round(glue.glue_average(large), 1) == 82.1
    del large["MNLI-mm"]
    with pytest.raises(ValueError, match="MNLI-mm"):
        glue.glue_average(large)


def test_main_score_and_score_names():
    assert glue.main_score("mrpc", {"f1": 88.9, "accuracy": 84.0}) == 88.9
    assert glue.main_score("stsb", {"pearson": 87.1, "spearman": 85.8}) == 85.8
    assert glue.score_name("mnli", "dev_matched") == "MNLI-m"
    assert glue.score_name("mnli", "test_mismatched") == "MNLI-mm"
    assert glue.score_name("sst2", "dev") == "SST-2"


def test_an_undefined_correlation_scores_zero_not_nan():
    """A collapsed regression head predicts one value: Pearson and Spearman are undefined
    (scipy returns NaN, which no JSON result file can hold); they score 0, as
    scikit-learn's MCC scores a constant classifier."""
    labels = np.asarray([0.0, 1.5, 3.0, 4.5])
    scores = glue.compute_metrics("stsb", np.full(4, 2.5), labels)
    assert scores == {"pearson": 0.0, "spearman": 0.0}
    assert skm.matthews_corrcoef([0, 1, 1, 0], [1, 1, 1, 1]) == 0.0  # the precedent


def test_damaged_records_of_a_glue_workdir_are_one_error_naming_them(tmp_path):
    """A truncated test-predictions file (np.load raised EOFError, a traceback) and a
    damaged glue_identity.json are errors that name the file."""
    from helpers import tiny_model_config

    from finetuning import pretrained as starts
    from finetuning import suite
    from tasks.glue_tasks import read_predictions
    from training import results

    predictions = tmp_path / "test_predictions.npy"
    np.save(predictions, np.arange(10))
    predictions.write_bytes(predictions.read_bytes()[:20])
    with pytest.raises(results.ResultsError, match=f"{predictions}: cannot be read"):
        read_predictions(str(predictions))

    (tmp_path / "glue_identity.json").write_text('{"init": ')
    pretrained = starts.Pretrained(tiny_model_config(), None, None, "somewhere@10")
    from configs import glue as glue_configs

    with pytest.raises(results.ResultsError, match=f"{tmp_path / 'glue_identity.json'}: "
                                                   f"cannot be read"):
        suite.check_workdir_identity(str(tmp_path), pretrained,
                                        glue_configs.get_config("task=rte"))
