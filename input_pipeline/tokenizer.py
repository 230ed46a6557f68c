"""BERT WordPiece tokenizer: train one on a corpus, or load tokenizer.json / vocab.txt.

The pipeline is BERT's (uncased by default): BertNormalizer (clean text, CJK
spacing, lowercase + strip accents), BertPreTokenizer (whitespace + punctuation),
WordPiece with '##' continuations, and a template post-processor giving
`[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]` with token type ids 0 / 1. A trained
vocabulary starts with [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4; a loaded Google
vocab.txt has [PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103, so code must use
`SpecialIds`, never literals (only [PAD]=0 is required: padding is zeros).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from common.files import write_text_atomic  # the project's one atomic file writer
from input_pipeline.errors import TokenizerError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
CONTINUATION_PREFIX = "##"
# Part of a trained tokenizer's cache key: "seeded" is train_tokenizer's reproducible
# training (the library's trainer alone gives a new vocabulary order in every process).
TRAINER_VERSION = "seeded"


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """Ids of BERT's special tokens in one vocabulary."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer, where: str = "tokenizer") -> SpecialIds:
        ids = {}
        for field, token in zip(("pad", "unk", "cls", "sep", "mask"), SPECIAL_TOKENS, strict=True):
            i = tokenizer.token_to_id(token)
            if i is None:
                raise TokenizerError(f"tokenizer: {where} has no {token} token")
            ids[field] = i
        if ids["pad"] != 0:  # packed arrays are zero-padded
            raise TokenizerError(f"tokenizer: {where} has {PAD}={ids['pad']}, expected 0")
        return cls(**ids)

    @property
    def never_masked(self) -> tuple[int, ...]:
        """Tokens that masking must leave alone ([UNK] is ordinary text, as in BERT)."""
        return (self.pad, self.cls, self.sep, self.mask)

    @property
    def all(self) -> tuple[int, ...]:
        return (self.pad, self.unk, self.cls, self.sep, self.mask)


def _bert_pipeline(tokenizer: Tokenizer, lowercase: bool) -> Tokenizer:
    """Adds BERT's normalizer, pre-tokenizer, decoder and [CLS]/[SEP] template."""
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION_PREFIX)
    return tokenizer


def _add_template(tokenizer: Tokenizer) -> Tokenizer:
    cls_id, sep_id = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)],
    )
    return tokenizer


def train_tokenizer(
    sentences: Iterable[str | list[str]] | Callable[[], Iterable[str | list[str]]],
    vocab_size: int, out_dir: str | os.PathLike | None = None, *,
    lowercase: bool = True, min_frequency: int = 2, limit_alphabet: int = 1000,
) -> Tokenizer:
    """Trains a WordPiece vocabulary of `vocab_size` tokens (specials included; more when
    the alphabet and its continuations alone exceed it).

    The same sentences give the same vocabulary, ids included, in every process: the
    library's trainer alone does not (see _seeded_trainer). `sentences` is read twice, as
    a stream: a list, or a function returning a fresh iterable each call (a one-shot
    iterator is refused). Its items are strings, or lists of strings (a chunk of a corpus;
    fewer Python round trips). The trainer keeps only word counts, so memory grows with
    the number of distinct words, not with the corpus.
    A small corpus can give fewer tokens than asked: read the real size from
    `tokenizer.get_vocab_size()`. With `out_dir`, saves tokenizer.json and vocab.txt.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise TokenizerError(f"tokenizer: vocab_size={vocab_size} is too small")
    read = _rereadable(sentences)
    first = read()
    trainer = _seeded_trainer(first, vocab_size, lowercase, min_frequency, limit_alphabet)
    second = read()
    if second is first and iter(second) is second:  # e.g. `lambda: generator`
        raise TypeError("train_tokenizer reads its sentences twice: the function must "
                        "return a fresh iterable at each call, not the same iterator")
    trained = _bert_pipeline(Tokenizer(models.WordPiece(unk_token=UNK)), lowercase)
    trained.train_from_iterator(second, trainer)
    # The seeds were the trainer's special tokens, so the tokenizer now treats "##e" in
    # raw text as a special token: rebuild it from the vocabulary, with BERT's five only.
    tokenizer = _bert_pipeline(Tokenizer(models.WordPiece(
        trained.get_vocab(with_added_tokens=False), unk_token=UNK,
        continuing_subword_prefix=CONTINUATION_PREFIX)), lowercase)
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    _add_template(tokenizer)
    SpecialIds.from_tokenizer(tokenizer)  # the trainer put them first; check anyway
    if out_dir is not None:
        save_tokenizer(tokenizer, out_dir)
    return tokenizer


def _rereadable(sentences) -> Callable[[], Iterable[str | list[str]]]:
    if callable(sentences):
        return sentences
    if iter(sentences) is sentences:
        raise TypeError("train_tokenizer reads its sentences twice: pass a list or a "
                        "function that returns a fresh iterable, not an iterator")
    return lambda: sentences


def _seeded_trainer(sentences: Iterable[str | list[str]], vocab_size: int,
                    lowercase: bool, min_frequency: int, limit_alphabet: int,
                    ) -> trainers.WordPieceTrainer:
    """A WordPiece trainer whose result does not depend on hash-map order.

    tokenizers' trainer (0.23; huggingface/tokenizers#1794) numbers the continuation
    characters ("##e") in the iteration order of a randomly seeded hash map, breaks ties
    between equally frequent merges by those numbers, and cuts the alphabet to
    `limit_alphabet` characters with ties in the same order: the same corpus gives a
    vocabulary in another order, often with other tokens, in every process. So a first
    pass finds every character and continuation character (a trainer stopped before its
    first merge) and counts the characters here; the real trainer then gets the
    continuations as leading tokens in code-point order and the alphabet fixed (the most
    frequent characters, ties by code point), which leaves nothing to the hash order.
    """
    # Code points counted as read (numpy, a megabyte at a time), then normalized one
    # distinct character at a time: BERT's normalizer maps each character on its own
    # (case, accents, spacing), so this counts what the trainer sees, far cheaper than
    # normalizing the text.
    raw = np.zeros(0x110000, np.int64)

    def count(texts: list[str]) -> None:
        raw[:] += np.bincount(np.frombuffer("".join(texts).encode("utf-32-le"), "<u4"),
                              minlength=raw.size)
        texts.clear()

    def counted():
        pending, size = [], 0
        for item in sentences:
            pending.extend([item] if isinstance(item, str) else item)
            size += len(item) if isinstance(item, str) else sum(map(len, item))
            if size > 1 << 20:
                count(pending)
                size = 0
            yield item
        count(pending)

    probe = _bert_pipeline(Tokenizer(models.WordPiece(unk_token=UNK)), lowercase)
    probe.train_from_iterator(counted(), trainers.WordPieceTrainer(
        vocab_size=0, show_progress=False, special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix=CONTINUATION_PREFIX))  # no limit_alphabet: every one
    normalizer = probe.normalizer
    counts = Counter()
    for code in np.flatnonzero(raw):
        for c in normalizer.normalize_str(chr(code)):
            counts[c] += int(raw[code])
    base = set(probe.get_vocab(with_added_tokens=False)) - set(SPECIAL_TOKENS)
    alphabet = sorted((t for t in base if not t.startswith(CONTINUATION_PREFIX)),
                      key=lambda c: (-counts[c], ord(c)))[:limit_alphabet]
    kept = set(alphabet)
    continuations = sorted(t for t in base if t.startswith(CONTINUATION_PREFIX)
                           and t[len(CONTINUATION_PREFIX):] in kept)
    return trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
        special_tokens=[*SPECIAL_TOKENS, *continuations],
        initial_alphabet=sorted(kept), limit_alphabet=len(kept),
        continuing_subword_prefix=CONTINUATION_PREFIX)


# Token ids are int32 in the model and at most int32 on disk (input_pipeline/packing.py).
MAX_TOKEN_ID = np.iinfo(np.int32).max - 1


def vocab_bound(tokenizer: Tokenizer) -> int:
    """One past the largest token id: the embedding rows a model needs and what the data
    cache's id width must hold. The token count for a dense vocabulary (a trained one,
    Google's vocab.txt), more when a tokenizer.json leaves gaps between ids; never the
    nominal get_vocab_size(), which counts tokens."""
    largest = max(tokenizer.get_vocab(with_added_tokens=True).values())
    if largest > MAX_TOKEN_ID:
        raise TokenizerError(f"tokenizer: token id {largest} does not fit int32 token ids")
    return largest + 1


def vocab_list(tokenizer: Tokenizer) -> list[str]:
    """Tokens ordered by id (the lines of vocab.txt); an id no token has is "[gapN]"."""
    tokens = [f"[gap{i}]" for i in range(vocab_bound(tokenizer))]
    for token, i in tokenizer.get_vocab(with_added_tokens=True).items():
        tokens[i] = token
    return tokens


def save_tokenizer(tokenizer: Tokenizer, out_dir: str | os.PathLike) -> Path:
    """Writes tokenizer.json and vocab.txt (each atomically) into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "vocab.txt", "".join(t + "\n" for t in vocab_list(tokenizer)))
    # tokenizer.json last: load_tokenizer prefers it, so its presence means "complete".
    write_text_atomic(out / "tokenizer.json", tokenizer.to_str(pretty=True))
    return out


def load_tokenizer(path: str | os.PathLike, *, lowercase: bool = True) -> Tokenizer:
    """Loads a directory (tokenizer.json preferred, else vocab.txt) or either file.

    `lowercase` applies to vocab.txt only (tokenizer.json carries its normalizer):
    True for uncased Google checkpoints. Truncation and padding saved in a tokenizer.json
    are dropped.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json" if (p / "tokenizer.json").is_file() else p / "vocab.txt"
    if not p.is_file():
        raise TokenizerError(f"tokenizer: no tokenizer.json or vocab.txt at {path}")
    try:
        if p.suffix == ".json":
            tokenizer = Tokenizer.from_file(str(p))
        else:
            tokenizer = Tokenizer(models.WordPiece.from_file(str(p), unk_token=UNK))
            _bert_pipeline(tokenizer, lowercase)
            if tokenizer.token_to_id(CLS) is not None and tokenizer.token_to_id(SEP) is not None:
                _add_template(tokenizer)
    except Exception as e:  # the Rust side raises plain Exceptions on bad files
        raise TokenizerError(f"tokenizer: cannot load {p}: {e}") from e
    # A tokenizer.json may carry its own truncation and padding (sentence-transformers'
    # pad every text to 128 tokens): every encoder here cuts and pads for itself, and a
    # padded sentence would be packed with [PAD]s inside it.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    SpecialIds.from_tokenizer(tokenizer, str(p))
    return tokenizer


def tokenizer_hash(tokenizer: Tokenizer) -> str:
    """Changes whenever the vocabulary or any pipeline setting does."""
    return hashlib.sha256(tokenizer.to_str().encode()).hexdigest()


def continuation_mask(tokenizer: Tokenizer) -> np.ndarray:
    """bool [vocab]: True for WordPiece continuation pieces ('##ing'), for whole-word masking."""
    return np.array([t.startswith(CONTINUATION_PREFIX) for t in vocab_list(tokenizer)], bool)


@dataclasses.dataclass(frozen=True)
class TokenizedDocs:
    """Token ids of documents of sentences, stored flat (CSR) to stay small.

    Sentence j is tokens[sentence_starts[j]:sentence_starts[j + 1]]; document d holds
    sentences doc_starts[d]:doc_starts[d + 1].
    """

    tokens: np.ndarray  # int32 [num_tokens]
    sentence_starts: np.ndarray  # int64 [num_sentences + 1]
    doc_starts: np.ndarray  # int64 [num_docs + 1]

    @property
    def num_docs(self) -> int:
        return len(self.doc_starts) - 1

    def sentences(self, doc: int) -> list[np.ndarray]:
        lo, hi = self.doc_starts[doc], self.doc_starts[doc + 1]
        starts = self.sentence_starts
        return [self.tokens[starts[j]:starts[j + 1]] for j in range(lo, hi)]


def tokenize_documents(
    tokenizer: Tokenizer, documents: Sequence[Sequence[str]], batch_size: int = 8192,
) -> TokenizedDocs:
    """Token ids (no special tokens, no truncation) of every sentence of every document.

    The plain, in-memory way (tests use it as the reference); the pipeline streams
    through input_pipeline.encoding.SentenceEncoder instead.
    """
    doc_starts = np.zeros(len(documents) + 1, np.int64)
    np.cumsum([len(d) for d in documents], out=doc_starts[1:])
    flat = [s for d in documents for s in d]
    lengths = np.zeros(len(flat), np.int64)
    chunks = []
    # Text that spells "[MASK]" or "[SEP]" is text: it must not become a special id,
    # which masking would treat as structure.
    saved = tokenizer.encode_special_tokens
    tokenizer.encode_special_tokens = True
    try:
        for lo in range(0, len(flat), batch_size):
            # encode_batch runs in parallel in Rust; Python only copies the ids out.
            encodings = tokenizer.encode_batch(flat[lo:lo + batch_size],
                                               add_special_tokens=False)
            lengths[lo:lo + len(encodings)] = [len(e.ids) for e in encodings]
            chunks.append(np.fromiter((i for e in encodings for i in e.ids), np.int32))
    finally:
        tokenizer.encode_special_tokens = saved
    sentence_starts = np.zeros(len(flat) + 1, np.int64)
    np.cumsum(lengths, out=sentence_starts[1:])
    tokens = np.concatenate(chunks) if chunks else np.zeros(0, np.int32)
    return TokenizedDocs(tokens, sentence_starts, doc_starts)
