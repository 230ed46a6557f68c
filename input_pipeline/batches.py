"""Deterministic, resumable MLM batches.

Training: the batch for global step s is a pure function of (seed, s), so a restarted
run only needs the step number. Sequences are visited in epochs; epoch e is the
permutation `default_rng([seed, 0, e])` of all N sequences, and step s takes
positions [s * B, (s + 1) * B) of the endless concatenation of those permutations.
Row j of the global batch is masked with `default_rng([seed, 1, s, j])`, so a
process that computes only its own rows gets exactly the rows of the global batch.

Eval: the held-out sequences in order, each masked with `default_rng([seed, 2, i])`
for its index i (the same mask at every eval, whatever the batch size); the last
batch is filled up with copies of earlier rows whose masked_weights are 0.

Batch dicts (this process's rows, numpy):
  input_ids int32 [b, L] (masked), token_type_ids int32 [b, L], attention_mask int32
  [b, L] (1 on real tokens), masked_positions / masked_ids int32 [b, P],
  masked_weights float32 [b, P].
With masker=None the masking is left to the device (input_pipeline/device_masking.py):
  input_ids [b, L] unmasked, as cached (uint16 or int32), token_type_ids int8,
  attention_mask int8, mask_stream int32 [b, 4] = (seed, stream, a, b) naming the
  row's random stream as above (train: step s, global row j; eval: example i), and
  for eval row_weights float32 [b] (0 for the filler rows).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from absl import logging

from input_pipeline.errors import InputPipelineError
from input_pipeline.masking import Masker
from input_pipeline.packing import PackedSplit

# First word after the seed: keeps the three random streams apart.
_PERMUTATION, _TRAIN_MASK, _EVAL_MASK = 0, 1, 2


def process_rows(global_batch_size: int, process_index: int, process_count: int) -> slice:
    """The rows of the global batch that one process feeds to its devices."""
    if process_count < 1 or not 0 <= process_index < process_count:
        raise InputPipelineError(
            f"batches: process_index={process_index} with process_count={process_count}")
    if global_batch_size % process_count:
        raise InputPipelineError(f"batches: global batch {global_batch_size} is not divisible "
                                 f"by process_count={process_count}")
    per = global_batch_size // process_count
    return slice(per * process_index, per * (process_index + 1))


def _device_features(data: PackedSplit, rows: np.ndarray,
                     streams: list[list[int]]) -> dict[str, np.ndarray]:
    """Unmasked rows as stored (the device casts and masks them): the host's whole job."""
    lengths = np.asarray(data.lengths[rows])
    return {
        "input_ids": np.asarray(data.input_ids[rows]),
        "token_type_ids": np.asarray(data.token_type_ids[rows], np.int8),
        "attention_mask": (np.arange(data.max_seq_length)[None, :]
                           < lengths[:, None]).astype(np.int8),
        "mask_stream": np.asarray(streams, np.int32).reshape(len(rows), 4),
    }


def _features(data: PackedSplit, rows: np.ndarray, masker: Masker,
              rngs: list[np.random.Generator]) -> dict[str, np.ndarray]:
    # The cache may hold uint16 ids; the model always gets int32.
    input_ids = np.asarray(data.input_ids[rows], np.int32)
    batch = masker(input_ids, rngs)
    lengths = np.asarray(data.lengths[rows])
    batch["token_type_ids"] = np.asarray(data.token_type_ids[rows], np.int32)
    batch["attention_mask"] = (
        np.arange(input_ids.shape[1])[None, :] < lengths[:, None]).astype(np.int32)
    return batch


class Batcher:
    """Training batches of one split; `batcher(step)` is this process's share of step s."""

    def __init__(self, data: PackedSplit, masker: Masker | None, global_batch_size: int,
                 seed: int, *, process_index: int = 0, process_count: int = 1):
        if len(data) == 0:
            raise InputPipelineError("batches: the training split has no sequences")
        if global_batch_size < 1:
            raise InputPipelineError(f"batches: global_batch_size={global_batch_size} < 1")
        if len(data) < global_batch_size:
            logging.warning("batches: the training split has %d sequences, fewer than the "
                            "global batch of %d: every batch repeats sequences (a corpus "
                            "this small is a smoke test, not pretraining)",
                            len(data), global_batch_size)
        self.data = data
        self.masker = masker
        self.global_batch_size = global_batch_size
        self.seed = seed
        self.rows = process_rows(global_batch_size, process_index, process_count)
        self._perms: dict[int, np.ndarray] = {}  # the last few epochs' permutations

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) >= 2:  # a batch spans at most a couple of epochs
                self._perms.pop(min(self._perms))
            rng = np.random.default_rng([self.seed, _PERMUTATION, epoch])
            self._perms[epoch] = rng.permutation(len(self.data))
        return self._perms[epoch]

    def indices(self, step: int) -> np.ndarray:
        """Sequence indices of the whole global batch of `step`."""
        if step < 0:
            raise InputPipelineError(f"batches: step={step} < 0")
        n = len(self.data)
        pos = step * self.global_batch_size + np.arange(self.global_batch_size, dtype=np.int64)
        epochs, offsets = pos // n, pos % n
        out = np.empty_like(pos)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = self._permutation(int(e))[offsets[sel]]
        return out

    def epoch(self, step: int) -> float:
        """Fractional epoch at the start of `step` (for logging)."""
        return step * self.global_batch_size / len(self.data)

    def batch(self, step: int, rows: slice | None = None) -> dict[str, np.ndarray]:
        """This process's rows of the batch for `step` (or the given rows of it)."""
        rows = self.rows if rows is None else rows
        positions = range(self.global_batch_size)[rows]
        if self.masker is None:
            return _device_features(self.data, self.indices(step)[rows],
                                    [[self.seed, _TRAIN_MASK, step, j] for j in positions])
        rngs = [np.random.default_rng([self.seed, _TRAIN_MASK, step, j]) for j in positions]
        return _features(self.data, self.indices(step)[rows], self.masker, rngs)

    __call__ = batch

    def global_batch(self, step: int) -> dict[str, np.ndarray]:
        """All rows of step s, as every process together sees them."""
        return self.batch(step, slice(None))

    def iterate(self, start_step: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """Endless batches from start_step on (resume: pass the restored step)."""
        step = start_step
        while True:
            yield self.batch(step)
            step += 1


class EvalBatches:
    """The held-out split as a fixed list of batches; iterate it as often as needed."""

    def __init__(self, data: PackedSplit, masker: Masker | None, global_batch_size: int,
                 seed: int = 0, *, num_batches: int | None = None, process_index: int = 0,
                 process_count: int = 1):
        if global_batch_size < 1:
            raise InputPipelineError(f"batches: global_batch_size={global_batch_size} < 1")
        self.data = data
        self.masker = masker
        self.global_batch_size = global_batch_size
        self.seed = seed
        self.rows = process_rows(global_batch_size, process_index, process_count)
        needed = -(-len(data) // global_batch_size)
        self.num_batches = needed if num_batches is None else min(num_batches, needed)

    def __len__(self) -> int:
        return self.num_batches

    def batch(self, i: int, rows: slice | None = None) -> dict[str, np.ndarray]:
        """This process's rows of eval batch i (or the given rows of it)."""
        if not 0 <= i < self.num_batches:
            raise IndexError(f"eval batch {i} of {self.num_batches}")
        examples = i * self.global_batch_size + np.arange(self.global_batch_size)
        examples = examples[self.rows if rows is None else rows]
        real = examples < len(self.data)
        rows = np.where(real, examples, examples % len(self.data))
        if self.masker is None:
            batch = _device_features(self.data, rows,
                                     [[self.seed, _EVAL_MASK, int(e), 0] for e in rows])
            batch["row_weights"] = real.astype(np.float32)  # filler rows count for nothing
            return batch
        rngs = [np.random.default_rng([self.seed, _EVAL_MASK, int(e)]) for e in rows]
        batch = _features(self.data, rows, self.masker, rngs)
        batch["masked_weights"] *= real[:, None]  # padding rows count for nothing
        return batch

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(self.num_batches):
            yield self.batch(i)
