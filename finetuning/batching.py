"""Batches of a fine-tuning run: epoch order, length buckets, the mesh's share, and
scoring a whole split. Every function here is a pure function of (data, seed, epoch),
so a resumed run sees the batches it would have seen."""

from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np

import input_pipeline
from training import sharding

# config.length_buckets="auto": batch lengths to choose from, up to max_seq_length. Each
# is one compilation of the train and predict steps; a batch pads to at most 1.5x its
# longest example (SST-2's training sentences: median 10 tokens, so most batches of 32
# fit 48 or 64 of 128).
AUTO_LENGTH_BUCKETS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def length_buckets(spec: str, max_length: int) -> tuple[int, ...]:
    """config.length_buckets: 'auto' (AUTO_LENGTH_BUCKETS up to max_seq_length), 'none'
    (every batch padded to max_seq_length), or lengths as 'A/B/C'; max_seq_length is
    always the last."""
    spec = str(spec).strip().lower()
    if spec == "none":
        return (max_length,)
    if spec == "auto":
        sizes = [b for b in AUTO_LENGTH_BUCKETS if b < max_length]
    else:
        try:
            sizes = [int(part) for part in spec.split("/") if part.strip()]
        except ValueError:
            raise ValueError(f"length_buckets={spec!r}: auto, none or lengths as "
                             f"A/B/C") from None
        bad = [b for b in sizes if not 0 < b <= max_length]
        if bad:
            raise ValueError(f"length_buckets={spec!r}: {bad[0]} is not in 1.."
                             f"max_seq_length={max_length}")
    return tuple(sorted(set(sizes) | {max_length}))


def batches(arrays: dict[str, np.ndarray], order: np.ndarray, batch_size: int,
            buckets: tuple[int, ...] | None = None, label_keys: tuple[str, ...] = ("labels",)):
    """Global batches of `batch_size` rows (the last padded with weight-0 rows). With
    `buckets`, each batch is cut to the shortest bucket its longest example fits
    (examples are padded on the right, so only padding is cut); the rows of a batch are
    the same either way, so a run stays a pure function of (seed, step)."""
    keys = ("input_ids", "token_type_ids", "attention_mask", *label_keys)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        pad = batch_size - len(rows)
        batch = {k: arrays[k][np.concatenate([rows, np.zeros(pad, rows.dtype)])] for k in keys}
        batch["weights"] = np.concatenate([np.ones(len(rows)), np.zeros(pad)]).astype(np.float32)
        if "labels" in batch:  # a missing label (test: -1 or NaN) must not reach the loss
            if batch["labels"].dtype.kind == "f":
                batch["labels"] = np.nan_to_num(batch["labels"])
            else:
                batch["labels"] = np.maximum(batch["labels"], 0)
        if buckets is not None:
            longest = int(batch["attention_mask"].sum(axis=1).max())
            width = next(b for b in buckets if b >= longest)
            for k in ("input_ids", "token_type_ids", "attention_mask"):
                batch[k] = batch[k][:, :width]
        yield batch


def on_mesh(batch: dict[str, np.ndarray], mesh, rules) -> dict[str, jax.Array]:
    """A global batch -> sharded arrays; each process contributes only its own rows."""
    rows = input_pipeline.process_rows(len(batch["weights"]), jax.process_index(),
                                       jax.process_count())
    return sharding.host_batch_to_global({k: v[rows] for k, v in batch.items()}, mesh, rules)


# group_by_length: examples are sorted by length within windows of this many batches.
GROUP_WINDOW_BATCHES = 64


def epoch_order(lengths: np.ndarray, seed: int, epoch: int, batch_size: int,
                group_by_length: bool = False) -> np.ndarray:
    """The training examples of one epoch, in batch order: a permutation drawn from
    (seed, epoch). group_by_length (Hugging Face's Trainer has the same option) then
    sorts each window of GROUP_WINDOW_BATCHES batches by length and shuffles the batches
    (the last, partial one stays last), so each batch holds examples of similar length
    and length buckets cut most of their padding; every example is still seen once per
    epoch, and the order is still a function of (seed, epoch)."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    if not group_by_length:
        return order
    window = batch_size * GROUP_WINDOW_BATCHES
    order = np.concatenate([
        chunk[np.argsort(-lengths[chunk], kind="stable")]
        for chunk in np.split(order, range(window, len(order), window))]) if len(order) else order
    full = len(order) // batch_size
    shuffled = rng.permutation(full)
    head = order[:full * batch_size].reshape(full, batch_size)[shuffled].reshape(-1)
    return np.concatenate([head, order[full * batch_size:]])


def predict_split(predict, params, arrays, batch_size: int, mesh, rules,
                  buckets: tuple[int, ...] | None = None,
                  label_keys: tuple[str, ...] = ("labels",)) -> np.ndarray:
    """Scores of every example, in the split's order. With `buckets` the examples are
    scored shortest first (each prediction depends on its own example only), so batches
    carry little padding; per-token scores (B, T, ...) of a shorter bucket are padded
    back to the longest width with the dtype's minimum (SQuAD's span logits)."""
    count = len(arrays["input_ids"])
    order = (np.argsort(arrays["attention_mask"].sum(axis=1), kind="stable")
             if buckets is not None else np.arange(count))
    out = []
    for batch in batches(arrays, order, batch_size, buckets, label_keys):
        real = int(batch["weights"].sum())
        with mesh, nn.logical_axis_rules(rules):
            scores = predict(params, on_mesh(batch, mesh, rules))
        out.append(sharding.to_host(scores)[:real])
    if out and out[0].ndim > 1:
        width = max(o.shape[1] for o in out)
        out = [np.pad(o, [(0, 0), (0, width - o.shape[1])] + [(0, 0)] * (o.ndim - 2),
                      constant_values=np.finfo(o.dtype).min) for o in out]
    scores = np.concatenate(out)
    unsorted = np.empty_like(scores)
    unsorted[order] = scores
    return unsorted

