"""One call from a corpus spec to packed, cached pretraining data and batch iterators.

  data = build_pretraining_data("stdlib", workdir / "data_cache", vocab_size=8192,
                                max_seq_length=128, eval_fraction=0.02)
  # or: data = from_config(config.data, workdir)
  rows = process_rows(global_batch_size, jax.process_index(), jax.process_count())
  batcher = data.batcher(global_batch_size, seed=0)
  batch = batcher.batch(step, rows)   # numpy dict: this process's rows of step `step`
  evals = data.eval_batches(global_batch_size, num_batches=8)
  for i in range(len(evals)): batch = evals.batch(i, rows)

Cache layout under `cache_dir`:
  tokenizer-<key>/{tokenizer.json,vocab.txt,COMPLETE}  key: corpus identity + vocab settings
  packed-<key>/{train,eval}_*.bin, meta.json, COMPLETE  key: corpus identity, tokenizer
                                                        hash, length, pair, eval fraction
A second call with the same arguments reads both back (verified, see
input_pipeline.cache) without touching the text. A build streams the corpus twice when
it trains the tokenizer (once to count words, once to pack), once otherwise; memory stays
bounded (input_pipeline.ingest).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from common.console import console
from input_pipeline import cache, corpus, packing, synthetic
from input_pipeline import tokenizer as tokenizer_lib
from input_pipeline.batches import Batcher, EvalBatches
from input_pipeline.documents import DEFAULT_CHUNK_CHARS
from input_pipeline.errors import InputPipelineError, TokenizerError
from input_pipeline.ingest import build_packed_entry
from input_pipeline.masking import Masker, target_mask
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
    mask_targets: str | None = None  # regex: only matching vocabulary entries are masked
    mask_token_prob: float = 0.8  # of the masked: -> [MASK]
    random_token_prob: float = 0.1  # of the masked: -> a random token

    @property
    def vocab_size(self) -> int:
        """One past the tokenizer's largest id (tokenizer.vocab_bound): the model's
        vocab_size must be at least this."""
        return tokenizer_lib.vocab_bound(self.tokenizer)

    @property
    def max_seq_length(self) -> int:
        return self.train.max_seq_length

    def masker(self, max_predictions: int | None = None, *, whole_word: bool | None = None,
               mask_prob: float | None = None) -> Masker:
        """BERT masking for this vocabulary; arguments left None take the defaults above."""
        whole_word = self.whole_word if whole_word is None else whole_word
        continuation = tokenizer_lib.continuation_mask(self.tokenizer) if whole_word else None
        targets = None if self.mask_targets is None else target_mask(
            tokenizer_lib.vocab_list(self.tokenizer), self.mask_targets)
        return Masker(self.special, self.vocab_size,
                      self.max_predictions if max_predictions is None else max_predictions,
                      self.mask_prob if mask_prob is None else mask_prob,
                      whole_word=whole_word, continuation=continuation,
                      mask_token_prob=self.mask_token_prob,
                      random_token_prob=self.random_token_prob, targets=targets)

    def device_masker(self) -> DeviceMasker:  # noqa: F821 - imported in the body
        """The same masking with the defaults above, run inside the jitted step."""
        # Imported here: the host pipeline (and its encode workers) stay free of JAX.
        from input_pipeline.device_masking import DeviceMasker

        return DeviceMasker.for_tokenizer(
            self.tokenizer, self.max_predictions, self.mask_prob, self.whole_word,
            mask_targets=self.mask_targets, mask_token_prob=self.mask_token_prob,
            random_token_prob=self.random_token_prob)

    def batcher(self, global_batch_size: int, *, seed: int, process_index: int = 0,
                process_count: int = 1, masker: Masker | None = None,
                on_device: bool = False) -> Batcher:
        """Training batches: `batcher.batch(step)` is this process's rows of step s.
        on_device=True leaves the masking to `device_masker()` in the step."""
        masker = None if on_device else masker or self.masker()
        return Batcher(self.train, masker, global_batch_size, seed,
                       process_index=process_index, process_count=process_count)

    def eval_batches(self, global_batch_size: int, num_batches: int | None = None, *,
                     seed: int = 0, process_index: int = 0, process_count: int = 1,
                     masker: Masker | None = None, on_device: bool = False) -> EvalBatches:
        """The held-out split, masked the same way at every eval (None: all of it)."""
        masker = None if on_device else masker or self.masker()
        return EvalBatches(self.eval, masker, global_batch_size, seed,
                           num_batches=num_batches, process_index=process_index,
                           process_count=process_count)


def _sentence_chunks(source: corpus.Corpus, chunk_chars: int,
                     sample: float) -> Iterator[list[str]]:
    """The corpus for the tokenizer trainer: every chunk, or an even, deterministic
    share of them (stratified like the eval draw, so spread over the whole corpus)."""
    if not 0.0 < sample <= 1.0:
        raise InputPipelineError(f"data: tokenizer_sample={sample} must be in (0, 1]")
    for i, chunk in enumerate(source.chunks(chunk_chars)):
        if sample == 1.0 or packing.is_eval_document(np.array([i]), sample, seed=1)[0]:
            yield chunk.sentences


def _get_tokenizer(source: corpus.Corpus, corpus_id: str, cache_dir: Path, vocab_size: int,
                   lowercase: bool, min_frequency: int, chunk_chars: int, sample: float,
                   ) -> tuple[Tokenizer, Path]:
    """The cached tokenizer for this corpus and settings, trained on first use.

    A cached one that no longer loads is set aside (renamed, with a warning) and trained
    again: the packed cache is keyed on the tokenizer's hash, so nothing stale is reused.
    """
    parts = [corpus_id, vocab_size, lowercase, min_frequency]
    if sample != 1.0:  # (only a sample's key names the sample)
        parts += [sample, chunk_chars]
    # A tokenizer cached before training was reproducible is some draw of the old
    # trainer's: a new key, so a shared cache gives every new run the reproducible one.
    parts.append(tokenizer_lib.TRAINER_VERSION)
    key = cache.cache_key("tokenizer", *parts)
    tok_dir = cache_dir / f"tokenizer-{key}"
    if cache.is_complete(tok_dir):
        try:
            return tokenizer_lib.load_tokenizer(tok_dir), tok_dir
        except TokenizerError as e:
            cache.set_aside(tok_dir, cache.DamagedEntry(tok_dir, str(e)))
    t0 = time.time()
    sampled = f" (a {sample:g} sample)" if sample != 1.0 else ""
    console(f"data: training a {vocab_size}-token WordPiece vocabulary on "
            f"{source.describe()}{sampled}...")
    with cache.atomic_directory(tok_dir) as tmp:
        with cache.writing(tmp):
            tokenizer_lib.train_tokenizer(lambda: _sentence_chunks(source, chunk_chars, sample),
                                          vocab_size, tmp, lowercase=lowercase,
                                          min_frequency=min_frequency)
    console(f"data: trained the vocabulary in {time.time() - t0:.1f} s -> {tok_dir}")
    # Load what is in place: after a lost race that is the other builder's tokenizer.
    return tokenizer_lib.load_tokenizer(tok_dir), tok_dir


def build_pretraining_data(
    corpus_spec: str | Sequence[str] | None,
    cache_dir: str | os.PathLike,
    *,
    vocab_size: int | None = None,
    max_seq_length: int,
    eval_fraction: float,
    pair: bool = False,
    tokenizer: str | os.PathLike | None = None,
    lowercase: bool = True,
    max_chars: int | None = None,
    min_frequency: int = 2,
    text_column: str = "text",
    encoding: str = "utf-8",
    max_predictions_per_seq: int = 20,
    mask_prob: float = 0.15,
    whole_word_mask: bool = False,
    mask_targets: str | None = None,
    mask_token_prob: float = 0.8,
    random_token_prob: float = 0.1,
    chunk_chars: int = DEFAULT_CHUNK_CHARS,
    tokenizer_sample: float = 1.0,
    workers: int | None = None,
    corpus_identity: str | None = None,
) -> PretrainingData:
    """Reads, tokenizes, splits and packs a corpus, or loads all of it from the cache.

    corpus_spec: None/"stdlib", "hf:NAME[:CONFIG[:SPLIT[:COLUMN]]]", "synthetic:TASK:..."
      (a generated task with its own fixed vocabulary: no tokenizer is trained), or
      comma-separated files/directories/globs (see input_pipeline.corpus).
    cache_dir: where tokenizers and packed arrays are kept (e.g. WORKDIR/data_cache, or a
      directory shared by runs on the same corpus).
    vocab_size, lowercase, min_frequency: for training a WordPiece vocabulary; ignored
      (vocab_size may be None) when `tokenizer` names an existing tokenizer.json /
      vocab.txt or their directory, e.g. a resumed run's own WORKDIR/tokenizer.
    max_seq_length, pair: packing (see input_pipeline.packing).
    eval_fraction: share of documents held out for evaluation (see input_pipeline.ingest
      for corpora with too few documents).
    max_chars: read only about this much text (quick runs, tests).
    text_column: the text column of a hub dataset (the spec's COLUMN field wins).
    encoding: of local text files (utf-8; latin-1, cp1252, ... for older corpora).
    max_predictions_per_seq, mask_prob, whole_word_mask, mask_targets, mask_token_prob,
      random_token_prob: masking defaults of the result (input_pipeline.masking).
    chunk_chars: text streamed per step (memory vs. per-chunk overhead).
    tokenizer_sample: share of the corpus (in chunks, evenly spread) that trains the
      WordPiece vocabulary; 1.0 (all of it) is the classic recipe. The trainer costs as
      much per word as before and keeps a count of every distinct word, so for a corpus
      of many GB a sample bounds both its time and memory (docs/INGEST.md).
    workers: encoding processes (None: one per core, at most ingest.MAX_WORKERS).
    corpus_identity: the source's identity() if the caller just computed it (a resume
      checks it first); None: computed here.
    The values that shape the data have no defaults here (vocab_size=None only means
    "not given", an error unless `tokenizer` is): configs/pretrain.py holds them.

    Raises CorpusError / TokenizerError / CacheError / InputPipelineError (all
    ValueError) with one line naming the bad path or argument.
    """
    cache_dir = Path(cache_dir)
    source = corpus.parse_corpus_spec(corpus_spec, max_chars=max_chars, text_column=text_column,
                                      encoding=encoding)
    # A resume has just computed it for its check (hashing a large corpus takes seconds).
    corpus_id = corpus_identity or source.identity()
    if isinstance(source, synthetic.SyntheticCorpus):
        source.check_fits(max_seq_length, pair)

    if tokenizer is not None:
        tok = tokenizer_lib.load_tokenizer(tokenizer, lowercase=lowercase)
        tok_dir = Path(tokenizer)
        tok_dir = tok_dir if tok_dir.is_dir() else tok_dir.parent
    elif isinstance(source, synthetic.SyntheticCorpus):
        tok, tok_dir = synthetic.fixed_tokenizer(source, cache_dir)
    elif vocab_size is None:
        raise InputPipelineError("data: vocab_size is needed to train a tokenizer "
                                 "(or pass an existing one as tokenizer=)")
    else:
        tok, tok_dir = _get_tokenizer(source, corpus_id, cache_dir, vocab_size, lowercase,
                                      min_frequency, chunk_chars, tokenizer_sample)
    special = SpecialIds.from_tokenizer(tok)
    tok_hash = tokenizer_lib.tokenizer_hash(tok)

    key = cache.cache_key("packed", corpus_id, tok_hash, max_seq_length, pair, eval_fraction)
    packed_dir = cache_dir / f"packed-{key}"
    t0 = time.time()
    loaded = cache.load_or_set_aside(packed_dir)
    width = packing.token_dtype(tokenizer_lib.vocab_bound(tok)).name
    if loaded is not None and loaded[1].get("token_dtype") != width:
        # Built when the id width followed the token count: a sparse high id was wrapped.
        cache.set_aside(packed_dir, cache.DamagedEntry(
            packed_dir / "meta.json", f"token ids stored as {loaded[1].get('token_dtype')}, "
            f"but this tokenizer's ids need {width}"))
        loaded = None
    if loaded is None:
        meta = {"corpus": source.describe(), "corpus_identity": corpus_id,
                "tokenizer_hash": tok_hash, "max_seq_length": max_seq_length, "pair": pair,
                "eval_fraction": eval_fraction}
        build_packed_entry(source, tok, special, packed_dir, max_seq_length=max_seq_length,
                           pair=pair, eval_fraction=eval_fraction, meta=meta,
                           chunk_chars=chunk_chars, workers=workers)
        t0 = time.time()
        # Read back and verified like any cache hit (also what lands on disk is checked);
        # after a lost race this is the other builder's entry.
        loaded = cache.load_packed(packed_dir)
        if loaded is None:
            raise InputPipelineError(f"data: {packed_dir} vanished right after its build")
    splits, meta = loaded
    console(f"data: {len(splits['train'])} train / {len(splits['eval'])} eval sequences from "
            f"{packed_dir} (verified in {time.time() - t0:.1f} s)")
    if mask_targets is not None:  # a bad pattern fails here, before any training
        target_mask(tokenizer_lib.vocab_list(tok), mask_targets)
    return PretrainingData(splits["train"], splits["eval"], tok, special, tok_dir, packed_dir,
                           meta, max_predictions_per_seq, mask_prob, whole_word_mask,
                           mask_targets, mask_token_prob, random_token_prob)


# config.data field -> build_pretraining_data argument (configs/pretrain.py documents them).
CONFIG_FIELDS = {
    "corpus": "corpus_spec", "text_column": "text_column", "max_corpus_chars": "max_chars",
    "tokenizer": "tokenizer", "vocab_size": "vocab_size", "lowercase": "lowercase",
    "tokenizer_sample": "tokenizer_sample",
    "max_seq_length": "max_seq_length", "sentence_pairs": "pair",
    "max_predictions_per_seq": "max_predictions_per_seq", "mask_prob": "mask_prob",
    "whole_word_mask": "whole_word_mask", "eval_fraction": "eval_fraction",
    "cache_dir": "cache_dir",
}
# Fields added later, with the default a config block from before them means.
OPTIONAL_CONFIG_FIELDS = {
    "mask_targets": ("mask_targets", None), "mask_token_prob": ("mask_token_prob", 0.8),
    "random_token_prob": ("random_token_prob", 0.1), "encoding": ("encoding", "utf-8"),
}
_MISSING = object()


def from_config(data_config: Any, workdir: str | os.PathLike,
                corpus_identity: str | None = None) -> PretrainingData:
    """`build_pretraining_data` from the `config.data` block of configs/pretrain.py.

    Every field of CONFIG_FIELDS must be present (configs/pretrain.py is the one place
    with defaults); a missing one is an InputPipelineError naming it. cache_dir None
    means WORKDIR/data_cache. corpus_identity: the corpus's identity() when the caller
    has it already, for the same data_config.
    """
    args = {}
    for field, arg in CONFIG_FIELDS.items():
        value = getattr(data_config, field, _MISSING)
        if value is _MISSING:
            raise InputPipelineError(f"config: data.{field} is missing "
                                     "(see configs/pretrain.py)")
        args[arg] = value
    for field, (arg, default) in OPTIONAL_CONFIG_FIELDS.items():
        args[arg] = getattr(data_config, field, default)
    corpus_spec = args.pop("corpus_spec")
    cache_dir = args.pop("cache_dir") or Path(workdir) / "data_cache"
    return build_pretraining_data(corpus_spec, cache_dir, corpus_identity=corpus_identity,
                                  **args)
