"""Streaming build of one packed cache entry: corpus chunks -> token ids -> rows ->
train/eval files, in bounded memory.

Per chunk (about 1 MB of text): `SentenceEncoder` turns the sentences into ids,
`StreamPacker` turns them into rows (the unfinished row carries over), each row goes to
the split of its document (`packing.is_eval_document`), and the rows are appended to
the entry's files. Memory is the chunk, the encoder's word cache and the tokenizer;
not the corpus.

Eval split, and corpora with too few documents: documents are held out by a stratified
draw (packing.is_eval_document), so D documents give about eval_fraction * D eval
documents. When that is below one (one book, a short file without blank lines), a
draw by document is meaningless: a single held-out document could be half the corpus,
or none is drawn. Then every row goes to training first and the last sequences of the
stream are held out instead: round(eval_fraction * N) of them, at least 1, leaving at
least 1 for training (the tail of the last document(s): contiguous text that training
never sees). So eval_fraction > 0 and a corpus of at least two sequences always give
both splits.
"""

from __future__ import annotations

import collections
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from absl import logging
from tokenizers import Tokenizer

from common.console import console
from input_pipeline import cache, packing
from input_pipeline import tokenizer as tokenizer_lib
from input_pipeline.corpus import Corpus
from input_pipeline.documents import DEFAULT_CHUNK_CHARS, TextChunk
from input_pipeline.encoding import SentenceEncoder
from input_pipeline.errors import CorpusError, InputPipelineError
from input_pipeline.packing import PackedRows, PackedSplit, StreamPacker
from input_pipeline.tokenizer import SpecialIds

_PROGRESS_SECONDS = 30.0  # a progress line this often while packing
# Encoding is Python-bound (the word cache), so it runs in worker processes, one per
# core up to this many: each holds a tokenizer and a word cache (~75 MB at most).
MAX_WORKERS = 8
# Chunks encoded in the calling process before workers start: a small corpus never
# pays for starting them (about a second each).
_INLINE_CHUNKS = 4


class _Workers:
    """input_pipeline.encode_worker processes, each with one chunk in flight at most (so
    neither side can block on a full pipe while the other waits for it)."""

    def __init__(self, count: int, tokenizer: Tokenizer, dtype: np.dtype):
        env = dict(os.environ, TOKENIZERS_PARALLELISM="false",  # one core per worker
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.procs = [subprocess.Popen([sys.executable, "-m", "input_pipeline.encode_worker"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
                      for _ in range(count)]
        for proc in self.procs:
            self._send(proc, (tokenizer.to_str(), dtype.str))

    def _send(self, proc: subprocess.Popen, message: Any) -> None:
        try:
            pickle.dump(message, proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            proc.stdin.flush()
        except BrokenPipeError:
            self._died(proc)

    def _receive(self, proc: subprocess.Popen) -> tuple[np.ndarray, np.ndarray, bool]:
        try:
            reply = pickle.load(proc.stdout)
        except EOFError:
            self._died(proc)
        if isinstance(reply[0], str):  # ("error", message)
            raise InputPipelineError(f"data: encoding worker failed: {reply[1]}")
        return reply

    @staticmethod
    def _check(chunk: TextChunk, lengths: np.ndarray) -> None:
        if len(lengths) != len(chunk.sentences):  # a sentence held a newline after all
            raise InputPipelineError("data: an encoding worker split a sentence at a newline")

    def _died(self, proc: subprocess.Popen) -> None:
        raise InputPipelineError(f"data: encoding worker {proc.pid} exited "
                                 f"(code {proc.wait()})")

    def map(self, chunks: Iterator[TextChunk],
            ) -> Iterator[tuple[TextChunk, np.ndarray, np.ndarray, bool]]:
        """Encodes chunks in order of arrival; results come out in the same order."""
        free = list(self.procs)
        busy: collections.deque = collections.deque()
        for chunk in chunks:
            if not free:
                proc, done = busy.popleft()
                reply = self._receive(proc)
                self._check(done, reply[1])
                yield done, *reply
                free.append(proc)
            proc = free.pop()
            self._send(proc, "\n".join(chunk.sentences))
            busy.append((proc, chunk))
        while busy:
            proc, done = busy.popleft()
            reply = self._receive(proc)
            self._check(done, reply[1])
            yield done, *reply

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # also when a reply is still pending after an error
            proc.wait()
            proc.stdin.close()
            proc.stdout.close()


def encoded_chunks(source: Corpus, tokenizer: Tokenizer, dtype: np.dtype, chunk_chars: int,
                   workers: int | None = None,
                   ) -> Iterator[tuple[TextChunk, np.ndarray, np.ndarray, bool]]:
    """(chunk, token ids, ids per sentence, word-level?) for every chunk, in order.

    After the first few chunks, encoding moves to `workers` processes (None: one per
    core, at most MAX_WORKERS); memory stays bounded (one chunk per worker in flight).
    """
    workers = min(os.cpu_count() or 1, MAX_WORKERS) if workers is None else workers
    encoder = SentenceEncoder(tokenizer)
    chunks = source.chunks(chunk_chars)
    for i, chunk in enumerate(chunks):
        tokens, lengths = encoder(chunk.sentences)
        yield chunk, packing.narrow(tokens, dtype), lengths, encoder.word_level
        if i + 1 >= _INLINE_CHUNKS and workers > 1:
            break
    else:
        return
    pool = _Workers(workers, tokenizer, dtype)
    try:
        yield from pool.map(chunks)
    finally:
        pool.close()


def _subset(split: PackedSplit, rows: np.ndarray) -> PackedSplit:
    return PackedSplit(split.input_ids[rows], split.token_type_ids[rows], split.lengths[rows])


class _Router:
    """Sends each packed row to its document's split and counts documents."""

    def __init__(self, writers: dict[str, cache.SplitWriter], eval_fraction: float):
        self.writers = writers
        self.eval_fraction = eval_fraction
        self.num_documents = {name: 0 for name in writers}
        self._last_doc = -1

    def __call__(self, rows: PackedRows) -> None:
        if not len(rows.doc_ids):
            return
        held = packing.is_eval_document(rows.doc_ids, self.eval_fraction)
        new = np.unique(rows.doc_ids[rows.doc_ids > self._last_doc])  # docs may span chunks
        new_held = packing.is_eval_document(new, self.eval_fraction)
        self.num_documents["eval"] += int(new_held.sum())
        self.num_documents["train"] += int(len(new) - new_held.sum())
        self._last_doc = int(rows.doc_ids[-1])
        self.writers["eval"].write(_subset(rows.split, np.flatnonzero(held)))
        self.writers["train"].write(_subset(rows.split, np.flatnonzero(~held)))


def _ensure_both_splits(writers: dict[str, cache.SplitWriter], eval_fraction: float,
                        num_documents: int, where: str) -> str:
    """The fallback of the module docstring; returns how eval was drawn."""
    train, held = writers["train"], writers["eval"]
    if eval_fraction == 0:
        return "none"
    if eval_fraction * num_documents >= 1 and held.rows > 0 and train.rows > 0:
        return "documents"
    held.move_tail_to(train, held.rows)
    if train.rows < 2:
        return "none (a corpus of one sequence)"
    k = min(max(1, round(eval_fraction * train.rows)), train.rows - 1)
    train.move_tail_to(held, k)
    logging.warning("data: %s has %d documents, too few to hold out %g of them; held out "
                    "its last %d of %d sequences instead", where, num_documents,
                    eval_fraction, k, train.rows + k)
    return f"last {k} sequences"


def build_packed_entry(
    source: Corpus, tokenizer: Tokenizer, special: SpecialIds, entry: Path, *,
    max_seq_length: int, pair: bool, eval_fraction: float, meta: dict[str, Any],
    chunk_chars: int = DEFAULT_CHUNK_CHARS, workers: int | None = None,
) -> None:
    """Streams `source` into the cache entry `entry` (atomically; see input_pipeline.cache)."""
    vocab_size = tokenizer_lib.vocab_bound(tokenizer)
    dtype = packing.token_dtype(vocab_size)
    packer = StreamPacker(special, max_seq_length, pair, dtype)
    word_level = True
    t0 = time.time()
    chars = corpus_tokens = 0
    next_log = t0 + _PROGRESS_SECONDS
    console(f"data: tokenizing and packing {source.describe()} into {max_seq_length}-token "
            f"sequences...")
    with cache.atomic_directory(entry) as tmp:
        writers = {name: cache.SplitWriter(tmp, name, max_seq_length, dtype)
                   for name in cache.SPLITS}
        try:
            route = _Router(writers, eval_fraction)
            for chunk, tokens, lengths, exact in encoded_chunks(source, tokenizer, dtype,
                                                                chunk_chars, workers):
                word_level &= exact
                route(packer.add(tokens, lengths, chunk.doc_ids))
                chars += sum(map(len, chunk.sentences))
                corpus_tokens += len(tokens)
                if time.time() >= next_log:
                    next_log = time.time() + _PROGRESS_SECONDS
                    console(f"data: packed {chars / 1e6:.0f} MB of text "
                            f"({chars / 1e6 / (time.time() - t0):.1f} MB/s)")
            route(packer.finish())
            eval_split = _ensure_both_splits(writers, eval_fraction,
                                             sum(route.num_documents.values()),
                                             source.describe())
        finally:
            for writer in writers.values():
                writer.close()
        if writers["train"].rows == 0:
            raise CorpusError(f"corpus: no tokens for training in {source.describe()}")
        meta.update({
            "num_documents": [route.num_documents[s] for s in cache.SPLITS],
            "num_sequences": [writers[s].rows for s in cache.SPLITS],
            "num_tokens": [int(writers[s].lengths().sum(dtype=np.int64)) for s in cache.SPLITS],
            "corpus_tokens": corpus_tokens,
            "corpus_chars": chars,
            "vocab_size": vocab_size,
            "token_dtype": dtype.name,
            "eval_split": eval_split,
            "word_level_encoding": word_level,
            "arrays": {k: v for w in writers.values() for k, v in w.describe().items()},
        })
        cache.write_meta(tmp, meta)
    seconds = time.time() - t0
    train_rows, eval_rows = meta["num_sequences"]
    console(f"data: packed {corpus_tokens} tokens ({chars / 1e6:.0f} MB of text, "
            f"{chars / 1e6 / max(seconds, 1e-9):.1f} MB/s) into {train_rows} train / "
            f"{eval_rows} eval sequences in {seconds:.1f} s -> {entry}")
