"""One call from a corpus spec to packed, cached pretraining data and batch iterators.

  data = build_pretraining_data("stdlib", workdir / "data_cache", vocab_size=8192,
                                max_seq_length=128, max_predictions_per_seq=20)
  # or: data = from_config(config.data, workdir)
  rows = process_rows(global_batch_size, jax.process_index(), jax.process_count())
  batcher = data.batcher(global_batch_size, seed=0)
  batch = batcher.batch(step, rows)   # numpy dict: this process's rows of step `step`
  evals = data.eval_batches(global_batch_size, num_batches=8)
  for i in range(len(evals)): batch = evals.batch(i, rows)

Cache layout under `cache_dir`:
  tokenizer-<key>/{tokenizer.json,vocab.txt,COMPLETE}  key: corpus identity + vocab settings
  packed-<key>/{train,eval}_*.npy, meta.json, COMPLETE  key: corpus identity, tokenizer
                                                        hash, length, pair, eval fraction
A second call with the same arguments reads both back without touching the text.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from absl import logging
from tokenizers import Tokenizer

from input_pipeline import cache, corpus, packing
from input_pipeline import tokenizer as tokenizer_lib
from input_pipeline.batches import Batcher, EvalBatches
from input_pipeline.errors import CorpusError
from input_pipeline.masking import Masker
from input_pipeline.packing import PackedSplit
from input_pipeline.tokenizer import SpecialIds


@dataclasses.dataclass(frozen=True, eq=False)
class PretrainingData:
    """Packed train/eval splits with their tokenizer; makes maskers and batch iterators.

    The masking settings are defaults for `masker`, `batcher` and `eval_batches`; they
    are applied per batch and are not part of the cache key.
    """

    train: PackedSplit
    eval: PackedSplit
    tokenizer: Tokenizer
    special: SpecialIds
    tokenizer_dir: Path  # holds tokenizer.json and vocab.txt (copy it next to checkpoints)
    packed_dir: Path  # the cache entry the arrays come from
    meta: dict  # what went into the cache key, and counts
    max_predictions: int = 20  # P, MLM targets per sequence
    mask_prob: float = 0.15
    whole_word: bool = False

    @property
    def vocab_size(self) -> int:
        """The tokenizer's real size: the model's vocab_size must be at least this."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def max_seq_length(self) -> int:
        return self.train.max_seq_length

    def masker(self, max_predictions: int | None = None, *, whole_word: bool | None = None,
               mask_prob: float | None = None) -> Masker:
        """BERT masking for this vocabulary; arguments left None take the defaults above."""
        whole_word = self.whole_word if whole_word is None else whole_word
        continuation = tokenizer_lib.continuation_mask(self.tokenizer) if whole_word else None
        return Masker(self.special, self.vocab_size,
                      self.max_predictions if max_predictions is None else max_predictions,
                      self.mask_prob if mask_prob is None else mask_prob,
                      whole_word=whole_word, continuation=continuation)

    def batcher(self, global_batch_size: int, *, seed: int, process_index: int = 0,
                process_count: int = 1, masker: Masker | None = None) -> Batcher:
        """Training batches: `batcher.batch(step)` is this process's rows of step s."""
        return Batcher(self.train, masker or self.masker(), global_batch_size, seed,
                       process_index=process_index, process_count=process_count)

    def eval_batches(self, global_batch_size: int, num_batches: int | None = None, *,
                     seed: int = 0, process_index: int = 0, process_count: int = 1,
                     masker: Masker | None = None) -> EvalBatches:
        """The held-out split, masked the same way at every eval (None: all of it)."""
        return EvalBatches(self.eval, masker or self.masker(), global_batch_size, seed,
                           num_batches=num_batches, process_index=process_index,
                           process_count=process_count)


def _get_tokenizer(source: corpus.Corpus, corpus_id: str, cache_dir: Path, vocab_size: int,
                   lowercase: bool, min_frequency: int,
                   documents: list[corpus.Document] | None,
                   ) -> tuple[Tokenizer, Path, list[corpus.Document] | None]:
    """The cached tokenizer for this corpus and settings, trained on first use."""
    key = cache.cache_key("tokenizer", corpus_id, vocab_size, lowercase, min_frequency)
    tok_dir = cache_dir / f"tokenizer-{key}"
    if not cache.is_complete(tok_dir):
        documents = documents if documents is not None else source.documents()
        t0 = time.time()
        with cache.atomic_directory(tok_dir) as tmp:
            tokenizer_lib.train_tokenizer(corpus.iter_sentences(documents), vocab_size, tmp,
                                          lowercase=lowercase, min_frequency=min_frequency)
        logging.info("data: trained a %d-token WordPiece vocabulary in %.1f s -> %s",
                     vocab_size, time.time() - t0, tok_dir)
    return tokenizer_lib.load_tokenizer(tok_dir), tok_dir, documents


def build_pretraining_data(
    corpus_spec: str | Sequence[str] | None,
    cache_dir: str | os.PathLike,
    *,
    vocab_size: int = 30522,
    max_seq_length: int = 128,
    pair: bool = False,
    eval_fraction: float = 0.01,
    tokenizer: str | os.PathLike | None = None,
    lowercase: bool = True,
    max_chars: int | None = None,
    min_frequency: int = 2,
    text_column: str = "text",
    max_predictions_per_seq: int = 20,
    mask_prob: float = 0.15,
    whole_word_mask: bool = False,
) -> PretrainingData:
    """Reads, tokenizes, splits and packs a corpus, or loads all of it from the cache.

    corpus_spec: None/"stdlib", "hf:NAME[:CONFIG[:SPLIT[:COLUMN]]]", or comma-separated
      files/directories/globs (see input_pipeline.corpus).
    cache_dir: where tokenizers and packed arrays are kept (e.g. WORKDIR/data, or a
      directory shared by runs on the same corpus).
    vocab_size, lowercase, min_frequency: for training a WordPiece vocabulary; ignored
      when `tokenizer` names an existing tokenizer.json / vocab.txt (or their directory).
    max_seq_length, pair: packing (see input_pipeline.packing).
    eval_fraction: documents held out for evaluation (at least one when > 0).
    max_chars: read only about this much text (quick runs, tests).
    text_column: the text column of a hub dataset (the spec's COLUMN field wins).
    max_predictions_per_seq, mask_prob, whole_word_mask: masking defaults of the result.

    Raises CorpusError / TokenizerError / InputPipelineError (all ValueError) with one
    line naming the bad path or argument.
    """
    cache_dir = Path(cache_dir)
    source = corpus.parse_corpus_spec(corpus_spec, max_chars=max_chars, text_column=text_column)
    corpus_id = source.identity()
    documents: list[corpus.Document] | None = None

    if tokenizer is not None:
        tok = tokenizer_lib.load_tokenizer(tokenizer, lowercase=lowercase)
        tok_dir = Path(tokenizer)
        tok_dir = tok_dir if tok_dir.is_dir() else tok_dir.parent
    else:
        tok, tok_dir, documents = _get_tokenizer(source, corpus_id, cache_dir, vocab_size,
                                                 lowercase, min_frequency, documents)
    special = SpecialIds.from_tokenizer(tok)
    tok_hash = tokenizer_lib.tokenizer_hash(tok)

    meta = {"corpus": source.describe(), "corpus_identity": corpus_id,
            "tokenizer_hash": tok_hash, "max_seq_length": max_seq_length, "pair": pair,
            "eval_fraction": eval_fraction}
    key = cache.cache_key("packed", corpus_id, tok_hash, max_seq_length, pair, eval_fraction)
    packed_dir = cache_dir / f"packed-{key}"
    splits = cache.load_packed(packed_dir)
    if splits is not None:
        meta = cache.load_meta(packed_dir)
        logging.info("data: loaded %d train / %d eval sequences from %s",
                     len(splits["train"]), len(splits["eval"]), packed_dir)
    else:
        t0 = time.time()
        documents = documents if documents is not None else source.documents()
        tokenized = tokenizer_lib.tokenize_documents(tok, documents)
        train_docs, eval_docs = packing.split_documents(tokenized.num_docs, eval_fraction)
        splits = {
            "train": packing.pack_documents(tokenized, train_docs, special, max_seq_length, pair),
            "eval": packing.pack_documents(tokenized, eval_docs, special, max_seq_length, pair),
        }
        if len(splits["train"]) == 0:
            raise CorpusError(f"corpus: no tokens for training in {source.describe()}")
        meta |= {
            "num_documents": [len(train_docs), len(eval_docs)],
            "num_sequences": [len(splits["train"]), len(splits["eval"])],
            "num_tokens": [s.num_tokens for s in splits.values()],
            "corpus_tokens": int(len(tokenized.tokens)),
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        }
        cache.save_packed(packed_dir, splits, meta)
        splits = cache.load_packed(packed_dir) or splits  # memory maps, like a cache hit
        fill = np.mean(splits["train"].lengths) / max_seq_length
        logging.info("data: packed %d tokens of %d documents into %d train / %d eval "
                     "sequences (%.0f%% filled) in %.1f s -> %s", len(tokenized.tokens),
                     tokenized.num_docs, len(splits["train"]), len(splits["eval"]),
                     100 * fill, time.time() - t0, packed_dir)
    return PretrainingData(splits["train"], splits["eval"], tok, special, tok_dir, packed_dir,
                           meta, max_predictions_per_seq, mask_prob, whole_word_mask)


def from_config(data_config: Any, workdir: str | os.PathLike) -> PretrainingData:
    """`build_pretraining_data` from the `config.data` block of configs/pretrain.py.

    Fields (all optional): corpus, text_column, max_corpus_chars, tokenizer, vocab_size,
    lowercase, max_seq_length, sentence_pairs, max_predictions_per_seq, mask_prob,
    whole_word_mask, eval_fraction, cache_dir (None: WORKDIR/data_cache).
    """
    def get(name: str, default: Any) -> Any:
        value = getattr(data_config, name, None)
        return default if value is None else value

    cache_dir = get("cache_dir", None) or Path(workdir) / "data_cache"
    return build_pretraining_data(
        get("corpus", None), cache_dir,
        vocab_size=get("vocab_size", 30522),
        max_seq_length=get("max_seq_length", 128),
        pair=get("sentence_pairs", False),
        eval_fraction=get("eval_fraction", 0.01),
        tokenizer=get("tokenizer", None),
        lowercase=get("lowercase", True),
        max_chars=get("max_corpus_chars", None),
        text_column=get("text_column", "text"),
        max_predictions_per_seq=get("max_predictions_per_seq", 20),
        mask_prob=get("mask_prob", 0.15),
        whole_word_mask=get("whole_word_mask", False),
    )
