"""Packing tokenized documents into fixed-length BERT sequences.

Single segments: `[CLS] t1 .. tk [SEP] [PAD] ..` with k <= L - 2.
Pairs (pair=True): `[CLS] A [SEP] B [SEP] [PAD] ..` with token types 0 for
`[CLS] A [SEP]` and 1 for `B [SEP]`, |A| + |B| <= L - 3 (as BERT's
create_pretraining_data, without the next-sentence label, so B always follows A).

Consecutive sentences of one document fill a sequence greedily; a sentence that
does not fit starts the next sequence. A sentence longer than the capacity is cut:
its head fills the current sequence, full-capacity pieces follow, and its tail
starts the next one. Nothing is dropped or truncated, so every token of the corpus
appears exactly once across the train and eval sequences (tests check this).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from input_pipeline.errors import InputPipelineError
from input_pipeline.tokenizer import SpecialIds, TokenizedDocs

Range = tuple[int, int]  # [start, end) into TokenizedDocs.tokens


@dataclasses.dataclass(frozen=True, eq=False)
class PackedSplit:
    """Packed sequences of one split (arrays may be read-only memory maps)."""

    input_ids: np.ndarray  # int32 [N, L], [PAD]=0 after `lengths`
    token_type_ids: np.ndarray  # int8 [N, L]
    lengths: np.ndarray  # int32 [N], non-padding tokens including [CLS] and [SEP]

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def max_seq_length(self) -> int:
        return self.input_ids.shape[1]

    @property
    def num_tokens(self) -> int:
        return int(np.sum(self.lengths))


def split_documents(num_docs: int, eval_fraction: float,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic (train, eval) document indices, each sorted.

    eval gets round(eval_fraction * num_docs) documents, but at least one when the
    fraction is > 0 and at least one document stays in train: a corpus of a few long
    books must still have an eval set.
    """
    if not 0.0 <= eval_fraction < 1.0:
        raise InputPipelineError(f"packing: eval_fraction={eval_fraction} must be in [0, 1)")
    n_eval = int(round(eval_fraction * num_docs))
    if eval_fraction > 0 and num_docs >= 2:
        n_eval = min(max(n_eval, 1), num_docs - 1)
    order = np.random.default_rng([seed, num_docs]).permutation(num_docs)
    return np.sort(order[n_eval:]), np.sort(order[:n_eval])


def _chunk_document(sentences: list[Range], capacity: int) -> list[list[Range]]:
    """Greedy packing of one document's sentences into chunks of <= capacity tokens."""
    chunks: list[list[Range]] = []
    cur: list[Range] = []
    used = 0
    for start, end in sentences:
        n = end - start
        if n == 0:
            continue
        if used + n <= capacity:
            cur.append((start, end))
            used += n
            continue
        if n <= capacity:  # fits a fresh sequence: keep the sentence whole
            chunks.append(cur)
            cur, used = [(start, end)], n
            continue
        # Too long for any sequence: it is cut anyway, so first fill what is left.
        if used < capacity:
            cur.append((start, start + capacity - used))
            start += capacity - used
        chunks.append(cur)
        while end - start > capacity:
            chunks.append([(start, start + capacity)])
            start += capacity
        cur, used = [(start, end)], end - start
    if cur:
        chunks.append(cur)
    return [c for c in chunks if c]


def _split_pair(chunk: list[Range]) -> tuple[list[Range], list[Range]]:
    """A/B at the sentence boundary nearest the middle; one sentence is cut in half."""
    sizes = np.array([e - s for s, e in chunk])
    if len(chunk) >= 2:
        cum = np.cumsum(sizes)[:-1]  # tokens in A for a cut after segment k
        k = int(np.argmin(np.abs(cum - sizes.sum() / 2))) + 1
        return chunk[:k], chunk[k:]
    (s, e), = chunk
    if e - s < 2:
        return chunk, []
    mid = s + (e - s) // 2
    return [(s, mid)], [(mid, e)]


def pack_documents(
    docs: TokenizedDocs, doc_indices: np.ndarray | list[int], special: SpecialIds,
    max_seq_length: int, pair: bool = False,
) -> PackedSplit:
    """Packs the given documents (in the given order) into one split."""
    min_len = 4 if pair else 3
    if max_seq_length < min_len:
        raise InputPipelineError(
            f"packing: max_seq_length={max_seq_length} is below {min_len} (pair={pair})")
    capacity = max_seq_length - (3 if pair else 2)
    starts = docs.sentence_starts
    chunks: list[list[Range]] = []
    for d in doc_indices:
        lo, hi = docs.doc_starts[d], docs.doc_starts[d + 1]
        sentences = [(int(starts[j]), int(starts[j + 1])) for j in range(lo, hi)]
        chunks.extend(_chunk_document(sentences, capacity))

    n = len(chunks)
    input_ids = np.full((n, max_seq_length), special.pad, np.int32)
    token_type_ids = np.zeros((n, max_seq_length), np.int8)
    lengths = np.zeros(n, np.int32)
    tokens = docs.tokens

    def content(ranges: list[Range]) -> np.ndarray:
        return np.concatenate([tokens[s:e] for s, e in ranges]) if ranges else tokens[:0]

    for i, chunk in enumerate(chunks):
        a, b = _split_pair(chunk) if pair else (chunk, [])
        row = [special.cls, *content(a), special.sep]
        len_a = len(row)
        if b:
            row += [*content(b), special.sep]
        input_ids[i, :len(row)] = row
        token_type_ids[i, len_a:len(row)] = 1
        lengths[i] = len(row)
    return PackedSplit(input_ids, token_type_ids, lengths)


def content_tokens(split: PackedSplit, special: SpecialIds) -> np.ndarray:
    """All non-special tokens of a split, row by row (for checks and statistics)."""
    ids = split.input_ids
    real = np.arange(ids.shape[1])[None, :] < split.lengths[:, None]
    keep = real & (ids != special.cls) & (ids != special.sep)
    return ids[keep]
