"""How much of a run's held-out text also occurs in its training split: n-gram overlap.

The command line is scripts/split_overlap.py.

A falling eval loss means the model generalises only if the eval sequences are not
text it trained on. The eval split holds out whole documents (docs/INGEST.md), but a
corpus can repeat text across documents (a licence header in every book, two editions
of one collection). This counts, over the sequences the run evaluates on (the first
eval_batches x batch_size of its eval split, as the eval loss does), the share of
token n-grams (no padding inside) that also occur anywhere in the training split, and
the share of eval sequences more than half (and more than 90%) made of such n-grams.
13 tokens is the usual contamination window (GPT-3's); 8 is stricter. Every token
position counts, where the eval loss scores only the masked ones (about one in six
here), so the share is of the text the scored positions sit in.

N-grams are compared as 64-bit polynomial hashes of their token ids: two different
n-grams can collide with probability about (number of training n-grams) / 2^64, far
below the shares reported. The run's data cache is reused; nothing is retrained.
"""

from __future__ import annotations

import numpy as np

from analysis.run_data import open_run_data

_BASE = np.uint64(1_000_003)


def ngram_hashes(ids: np.ndarray, n: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, valid), each [sequences, length - n + 1]: the hash of the n-gram starting
    at each position (uint64 arithmetic wraps, which is the hash), and whether it holds
    no padding."""
    ids = np.asarray(ids, dtype=np.uint64)
    width = ids.shape[1] - n + 1
    if width < 1:
        raise ValueError(f"n = {n} is longer than the sequences ({ids.shape[1]} tokens)")
    hashes = np.zeros((ids.shape[0], width), dtype=np.uint64)
    valid = np.ones((ids.shape[0], width), dtype=bool)
    for k in range(n):
        window = ids[:, k:k + width]
        hashes = hashes * _BASE + window
        valid &= window != pad
    return hashes, valid


def overlap(train_ids: np.ndarray, eval_ids: np.ndarray, n: int, pad: int) -> dict:
    """The eval n-grams' share seen in training, and per-sequence shares above 0.5 / 0.9."""
    eval_hashes, eval_valid = ngram_hashes(eval_ids, n, pad)
    counted = int(eval_valid.sum())
    if counted == 0:
        raise ValueError(f"the eval sequences hold no {n}-gram without padding")
    train_hashes, train_valid = ngram_hashes(train_ids, n, pad)
    seen = np.isin(eval_hashes, np.unique(train_hashes[train_valid])) & eval_valid
    with_ngrams = eval_valid.any(1)  # a sequence too padded to hold one has no share
    per_sequence = seen.sum(1)[with_ngrams] / eval_valid.sum(1)[with_ngrams]
    return {"n": n, "eval_ngrams": counted, "seen_in_train": float(seen.sum() / counted),
            "sequences": int(per_sequence.size),
            "sequences_over_half_seen": float(np.mean(per_sequence > 0.5)),
            "sequences_over_90pct_seen": float(np.mean(per_sequence > 0.9))}


def run_overlap(workdir: str, sizes: list[int]) -> dict:
    """overlap() of a pretraining workdir's splits (its config.json's data block and
    eval size) for each n in sizes."""
    run = open_run_data(workdir)
    data, num_eval = run.data, run.num_evaluated
    if num_eval == 0:
        raise ValueError(f"{workdir}: the run has no eval split to check")
    train = np.asarray(data.train.input_ids)
    held_out = np.asarray(data.eval.input_ids[:num_eval])
    return {"train_sequences": int(train.shape[0]), "eval_sequences": num_eval,
            "by_n": [overlap(train, held_out, n, data.special.pad) for n in sizes]}
