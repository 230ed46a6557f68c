"""The unigram yardstick of a pretraining run: how far below it the run's MLM loss is.

The command line is scripts/unigram_baseline.py.

A model that ignores the context and predicts the training split's token
frequencies (add-one smoothed counts, numpy) is scored on every non-special token
of the held-out sequences the run evaluates on (the first eval_batches x
batch_size of its eval split). The MLM eval loss averages over masked positions,
which the masking draws uniformly from those same tokens, so the two are the same
expectation; the difference is how much the run learnt from context. The run's
data cache is reused (config.json's data block), nothing is retrained.
"""

from __future__ import annotations

import numpy as np

from analysis.run_data import open_run_data
from training import results


def unigram_log_probs(train_ids: np.ndarray, vocab_size: int, excluded: list[int]) -> np.ndarray:
    """log p(token) from add-one counts over the training tokens; excluded ids get none."""
    counts = np.bincount(train_ids.ravel(), minlength=vocab_size).astype(np.float64)
    counts[excluded] = 0.0
    counts += 1.0
    counts[excluded] = 0.0
    with np.errstate(divide="ignore"):
        return np.log(counts / counts.sum())


def scored_tokens(split, num_sequences: int, excluded: list[int]) -> np.ndarray:
    """Every non-special token of the first num_sequences sequences."""
    ids = np.asarray(split.input_ids[:num_sequences], dtype=np.int64)
    keep = ~np.isin(ids, excluded)
    return ids[keep]


def baseline(workdir: str) -> dict[str, float]:
    run = open_run_data(workdir)
    data, num_sequences = run.data, run.num_evaluated
    special = data.special
    excluded = [special.pad, special.cls, special.sep, special.mask]
    train_tokens = np.asarray(data.train.input_ids, dtype=np.int64)
    log_p = unigram_log_probs(train_tokens[train_tokens != special.pad], data.vocab_size,
                              excluded)
    tokens = scored_tokens(data.eval, num_sequences, excluded)
    if tokens.size == 0:
        raise ValueError(f"{workdir}: the eval split has no tokens to score")
    out = {"unigram_loss": float(-log_p[tokens].mean()),
           "unigram_accuracy": float(np.mean(tokens == int(np.argmax(log_p)))),
           "scored_tokens": int(tokens.size), "eval_sequences": num_sequences}
    final = results.read_quietly(results.FinalMetrics, workdir)
    loss = final.metric("eval_loss") if final else None
    if loss is not None:
        out["eval_loss"] = float(loss)
        out["below_unigram"] = out["unigram_loss"] - float(loss)
    return out
