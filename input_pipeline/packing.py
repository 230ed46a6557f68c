"""Packing token ids into fixed-length BERT sequences, chunk by chunk.

Single segments: `[CLS] t1 .. tk [SEP] [PAD] ..` with k <= L - 2.
Pairs (pair=True): `[CLS] A [SEP] B [SEP] [PAD] ..` with token types 0 for
`[CLS] A [SEP]` and 1 for `B [SEP]`, |A| + |B| <= L - 3 (as BERT's
create_pretraining_data, without the next-sentence label, so B always follows A).

Consecutive sentences of one document fill a sequence greedily; a sentence that
does not fit starts the next sequence. A sentence longer than the capacity is cut:
its head fills the current sequence, full-capacity pieces follow, and its tail
starts the next one. Nothing is dropped or truncated, so every token of the corpus
appears exactly once across the train and eval sequences (tests check this).

`StreamPacker` does this over a stream of chunks: the sequence still being filled at
the end of a chunk is carried into the next one, so the result does not depend on
where chunks end. The held-out split is by document: `is_eval_document` draws a stratified sample of
document numbers that needs no count of documents in advance (input_pipeline.ingest
handles corpora with too few documents).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from input_pipeline.errors import InputPipelineError
from input_pipeline.tokenizer import SpecialIds, TokenizedDocs


@dataclasses.dataclass(frozen=True, eq=False)
class PackedSplit:
    """Packed sequences of one split (arrays may be read-only memory maps)."""

    input_ids: np.ndarray  # uint16 or int32 [N, L], [PAD]=0 after `lengths`
    token_type_ids: np.ndarray  # int8 [N, L]
    lengths: np.ndarray  # int32 [N], non-padding tokens including [CLS] and [SEP]

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def max_seq_length(self) -> int:
        return self.input_ids.shape[1]

    @property
    def num_tokens(self) -> int:
        return int(np.sum(self.lengths, dtype=np.int64))


@dataclasses.dataclass(frozen=True, eq=False)
class PackedRows:
    """Rows made from one chunk, with the document each row belongs to."""

    split: PackedSplit
    doc_ids: np.ndarray  # int64 [N]


def token_dtype(vocab_bound: int) -> np.dtype:
    """The id width for ids below `vocab_bound` (tokenizer.vocab_bound: one past the
    largest id, not the token count): uint16 when every id fits (half the disk and page
    cache of int32), else int32."""
    return np.dtype(np.uint16 if vocab_bound <= np.iinfo(np.uint16).max + 1 else np.int32)


def narrow(tokens: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`tokens` as `dtype`, refusing any id that does not fit (astype would wrap it:
    70000 stored as 4464 in uint16)."""
    dtype = np.dtype(dtype)
    if tokens.size and (tokens.max() > np.iinfo(dtype).max or tokens.min() < 0):
        raise InputPipelineError(f"data: token id {int(tokens.max())} does not fit the cache's "
                                 f"{dtype.name} ids")
    return tokens.astype(dtype, copy=False)


# --------------------------------------------------------------------------------------
# Train / eval assignment
# --------------------------------------------------------------------------------------


def eval_block_size(eval_fraction: float) -> int:
    """Documents per stratum of the eval draw: ceil(1 / eval_fraction)."""
    return max(1, int(np.ceil(1.0 / eval_fraction - 1e-9)))


def is_eval_document(doc_ids: np.ndarray, eval_fraction: float, seed: int = 0) -> np.ndarray:
    """bool per document number: whether it is held out for eval.

    Stratified, so the count is right however few documents there are and needs no
    total in advance: the numbers are cut into blocks of B = ceil(1/eval_fraction), block
    k holds out m_k of its B documents (m_k = floor((k+1) B f) - floor(k B f), so the
    first n blocks hold out floor(n B f) in all), chosen by the permutation
    default_rng([seed, k]). A pure function of (seed, fraction, number).
    """
    if not 0.0 <= eval_fraction < 1.0:
        raise InputPipelineError(f"packing: eval_fraction={eval_fraction} must be in [0, 1)")
    doc_ids = np.asarray(doc_ids, np.int64)
    held = np.zeros(doc_ids.shape, bool)
    if eval_fraction == 0 or not doc_ids.size:
        return held
    size = eval_block_size(eval_fraction)
    blocks = doc_ids // size
    for k in np.unique(blocks).tolist():
        quota = int(np.floor((k + 1) * size * eval_fraction + 1e-9)) - int(
            np.floor(k * size * eval_fraction + 1e-9))
        rank = np.random.default_rng([seed, k]).permutation(size)
        members = blocks == k
        held[members] = rank[doc_ids[members] % size] < quota
    return held


def split_documents(num_docs: int, eval_fraction: float,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train, eval) document numbers, each sorted, under `is_eval_document`."""
    held = is_eval_document(np.arange(num_docs), eval_fraction, seed)
    return np.flatnonzero(~held), np.flatnonzero(held)


# --------------------------------------------------------------------------------------
# Packing
# --------------------------------------------------------------------------------------


def _split_pair(pieces: list[tuple[int, int]]) -> int | None:
    """Where B starts, as a count of A's pieces, at the sentence boundary nearest the
    middle; None for a single piece (cut in half by the caller if it has >= 2 tokens)."""
    if len(pieces) < 2:
        return None
    total = sum(n for _, n in pieces)
    best, best_k, used = None, 1, 0
    for k, (_, n) in enumerate(pieces[:-1], start=1):
        used += n
        gap = abs(used - total / 2)
        if best is None or gap < best:  # the first minimum, as np.argmin
            best, best_k = gap, k
    return best_k


class StreamPacker:
    """Packs chunks of (token ids, sentence lengths, document numbers) into rows.

    `add` returns the rows completed by a chunk; the row still open is carried over,
    and `finish` returns it. Documents never share a row.
    """

    def __init__(self, special: SpecialIds, max_seq_length: int, pair: bool = False,
                 dtype: np.dtype | type = np.int32):
        min_len = 4 if pair else 3
        if max_seq_length < min_len:
            raise InputPipelineError(
                f"packing: max_seq_length={max_seq_length} is below {min_len} (pair={pair})")
        self.special = special
        self.max_seq_length = max_seq_length
        self.pair = pair
        self.dtype = np.dtype(dtype)
        self.capacity = max_seq_length - (3 if pair else 2)
        self._carry_tokens = np.zeros(0, np.int32)
        self._carry_lengths: list[int] = []  # pieces of the open row
        self._carry_doc = -1

    def add(self, tokens: np.ndarray, sentence_lengths: np.ndarray,
            doc_ids: np.ndarray | list[int]) -> PackedRows:
        return self._pack(tokens, sentence_lengths, doc_ids, final=False)

    def finish(self) -> PackedRows:
        return self._pack(np.zeros(0, np.int32), np.zeros(0, np.int64), [], final=True)

    def _pack(self, tokens: np.ndarray, sentence_lengths: np.ndarray,
              doc_ids: np.ndarray | list[int], final: bool) -> PackedRows:
        lengths = [*self._carry_lengths, *np.asarray(sentence_lengths).tolist()]
        docs = [self._carry_doc] * len(self._carry_lengths) + np.asarray(doc_ids).tolist()
        tokens = np.concatenate([self._carry_tokens, np.asarray(tokens)])
        if len(lengths) != len(docs) or sum(lengths) != len(tokens):
            raise InputPipelineError("packing: sentence lengths do not add up to the tokens")
        rows, row_docs, open_row, open_doc = self._greedy(lengths, docs)
        if final and open_row:
            rows.append(open_row)
            row_docs.append(open_doc)
            open_row = []
        if open_row:
            start = open_row[0][0]
            end = open_row[-1][0] + open_row[-1][1]
            self._carry_tokens = tokens[start:end].copy()  # a row's pieces are contiguous
            self._carry_lengths = [n for _, n in open_row]
            self._carry_doc = open_doc
        else:
            self._carry_tokens, self._carry_lengths, self._carry_doc = tokens[:0], [], -1
        return PackedRows(self._assemble(tokens, rows), np.asarray(row_docs, np.int64))

    def _greedy(self, lengths: list[int], docs: list[int]):
        """Rows as lists of (start, length) pieces of `tokens`; the last row left open."""
        cap = self.capacity
        rows: list[list[tuple[int, int]]] = []
        row_docs: list[int] = []
        cur: list[tuple[int, int]] = []
        used = 0
        cur_doc = docs[0] if docs else -1
        start = 0
        for n, d in zip(lengths, docs, strict=True):
            if d != cur_doc:
                if cur:
                    rows.append(cur)
                    row_docs.append(cur_doc)
                cur, used, cur_doc = [], 0, d
            s, start = start, start + n
            if n == 0:
                continue
            if used + n <= cap:
                cur.append((s, n))
                used += n
                continue
            if n <= cap:  # fits a fresh sequence: keep the sentence whole (cur is not empty)
                rows.append(cur)
                row_docs.append(cur_doc)
                cur, used = [(s, n)], n
                continue
            # Too long for any sequence: it is cut anyway, so first fill what is left.
            if used < cap:
                cur.append((s, cap - used))
                s, n = s + cap - used, n - (cap - used)
            rows.append(cur)
            row_docs.append(cur_doc)
            while n > cap:
                rows.append([(s, cap)])
                row_docs.append(cur_doc)
                s, n = s + cap, n - cap
            cur, used = [(s, n)], n
        return rows, row_docs, cur, cur_doc

    def _assemble(self, tokens: np.ndarray, rows: list[list[tuple[int, int]]]) -> PackedSplit:
        """Rows of pieces -> arrays: token copies vectorised, Python only per piece."""
        L, sp = self.max_seq_length, self.special
        n = len(rows)
        src: list[int] = []
        dst: list[int] = []  # flat position in the [n, L] output
        size: list[int] = []
        lengths = np.zeros(n, np.int32)
        b_start = np.full(n, L + 1, np.int64)  # first column of segment B (none: past L)
        mid_sep: list[tuple[int, int]] = []
        for r, pieces in enumerate(rows):
            k = _split_pair(pieces) if self.pair else len(pieces)
            if self.pair and k is None:
                s, m = pieces[0]
                k, pieces = (1, [(s, m // 2), (s + m // 2, m - m // 2)]) if m >= 2 else (1, pieces)
            col = r * L + 1
            for j, (s, m) in enumerate(pieces):
                if j == k:  # [SEP] between A and B
                    mid_sep.append((r, col - r * L))
                    b_start[r] = col - r * L + 1
                    col += 1
                src.append(s)
                dst.append(col)
                size.append(m)
                col += m
            lengths[r] = col - r * L + 1
        input_ids = np.full((n, L), sp.pad, self.dtype)
        if size:
            size_a = np.asarray(size, np.int64)
            first = np.cumsum(size_a) - size_a
            offset = np.arange(int(size_a.sum())) - np.repeat(first, size_a)
            input_ids.reshape(-1)[np.repeat(dst, size_a) + offset] = \
                tokens[np.repeat(src, size_a) + offset]
        rows_idx = np.arange(n)
        input_ids[:, 0] = sp.cls
        input_ids[rows_idx, lengths - 1] = sp.sep
        if mid_sep:
            r_idx, c_idx = np.asarray(mid_sep).T
            input_ids[r_idx, c_idx] = sp.sep
        cols = np.arange(L)[None, :]
        token_type_ids = ((cols >= b_start[:, None]) & (cols < lengths[:, None])).astype(np.int8)
        return PackedSplit(input_ids, token_type_ids, lengths)


def pack_documents(
    docs: TokenizedDocs, doc_indices: np.ndarray | list[int], special: SpecialIds,
    max_seq_length: int, pair: bool = False,
) -> PackedSplit:
    """Packs the given documents (in the given order) into one in-memory split."""
    packer = StreamPacker(special, max_seq_length, pair)
    starts = docs.sentence_starts
    pieces, lengths, numbers = [], [], []
    for number, d in enumerate(doc_indices):
        lo, hi = docs.doc_starts[d], docs.doc_starts[d + 1]
        pieces.append(docs.tokens[starts[lo]:starts[hi]])
        lengths.append(np.diff(starts[lo:hi + 1]))
        numbers.append(np.full(hi - lo, number))
    if not pieces:
        return packer.finish().split
    rows = [packer.add(np.concatenate(pieces), np.concatenate(lengths),
                       np.concatenate(numbers)), packer.finish()]
    return concat_splits([r.split for r in rows])


def concat_splits(splits: list[PackedSplit]) -> PackedSplit:
    return PackedSplit(*(np.concatenate([getattr(s, f) for s in splits])
                         for f in ("input_ids", "token_type_ids", "lengths")))


def content_tokens(split: PackedSplit, special: SpecialIds) -> np.ndarray:
    """All non-special tokens of a split, row by row (for checks and statistics)."""
    ids = split.input_ids
    real = np.arange(ids.shape[1])[None, :] < split.lengths[:, None]
    keep = real & (ids != special.cls) & (ids != special.sep)
    return ids[keep]
