"""Token ids of sentences at corpus scale: each distinct space-separated word is run
through the tokenizer once, and sentences are assembled from a cache with numpy.

Why this is exact: BERT's normalizer works character by character and maps U+0020 to
itself, and BERT's pre-tokenizer splits at every space and drops it, so no token ever
spans a space and the ids of "w1 w2" are the ids of "w1" followed by those of "w2".
Only splits at U+0020 are made here; anything else (tabs, no-break spaces, accents,
CJK, punctuation) stays inside a word and is handled by the tokenizer itself. The
fast path is used only for tokenizers whose pipeline has that property (checked from
their JSON), and the first sentences of every encoder are compared against plain
`encode_batch_fast`; a difference switches that encoder to sentence-by-sentence
encoding with a warning.

Why it pays: a corpus of N words has far fewer distinct words (Zipf), and the Rust
normalizer and pre-tokenizer cost about as much per character as everything else
together: on the 35 MB shared corpus this makes encoding 3-4x faster.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
from absl import logging
from tokenizers import Tokenizer

# Pipeline parts that never join text across a space or split one word differently
# when it stands alone (see the module docstring).
_SAFE_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFD", "NFKD", "NFC", "NFKC",
                     "StripAccents"}
_SAFE_PRE_TOKENIZERS = {"BertPreTokenizer", "WhitespaceSplit", "Whitespace", "Punctuation",
                        "Digits"}
_SPACE_SPLITTERS = {"BertPreTokenizer", "WhitespaceSplit", "Whitespace"}

# Words encoded per call: one long string per group instead of one Encoding per word
# (the per-Encoding cost dominates for single words).
_GROUP_WORDS = 4096
# First sentences compared with the tokenizer's own sentence encoding.
_CHECK_SENTENCES = 2000


def _parts(component: dict | None) -> list[dict]:
    if component is None:
        return []
    if component.get("type") == "Sequence":
        key = "normalizers" if "normalizers" in component else "pretokenizers"
        return [p for c in component.get(key, []) for p in _parts(c)]
    return [component]


def splits_at_spaces(tokenizer: Tokenizer) -> bool:
    """Whether the ids of a text are the ids of its U+0020-separated words, concatenated."""
    spec = json.loads(tokenizer.to_str())
    normalizers = _parts(spec.get("normalizer"))
    pre = _parts(spec.get("pre_tokenizer"))
    if not all(n.get("type") in _SAFE_NORMALIZERS for n in normalizers):
        return False
    if not pre or pre[0].get("type") not in _SPACE_SPLITTERS:
        return False
    if not all(p.get("type") in _SAFE_PRE_TOKENIZERS for p in pre):
        return False
    # Non-special added tokens are matched in the raw text and may span spaces.
    return all(t.special for t in tokenizer.get_added_tokens_decoder().values())


def _ids_of(encodings: list) -> tuple[np.ndarray, np.ndarray]:
    """(all ids concatenated as int32, number of ids per encoding)."""
    ids = [e.ids for e in encodings]
    lengths = np.fromiter(map(len, ids), np.int64, len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(lengths.sum()))
    return flat, lengths


class SentenceEncoder:
    """encoder(sentences) -> (token ids int32, ids per sentence int64), without special
    tokens or truncation; text spelling "[MASK]" stays text (encode_special_tokens)."""

    def __init__(self, tokenizer: Tokenizer, max_cached_words: int = 500_000):
        self.tokenizer = tokenizer
        self.max_cached_words = max_cached_words  # ~150 bytes each in Python: ~75 MB
        self.word_level = splits_at_spaces(tokenizer)
        self._checked = not self.word_level
        self._reset()

    def _reset(self) -> None:
        self._index: dict[str, int] = {"": 0}  # word -> row in the arrays below
        self._pool = np.zeros(0, np.int32)  # ids of all cached words, concatenated
        self._offset = np.zeros(1, np.int64)  # word -> start in _pool
        self._length = np.zeros(1, np.int64)  # word -> number of ids

    def __call__(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        saved = self.tokenizer.encode_special_tokens
        self.tokenizer.encode_special_tokens = True
        try:
            if not self.word_level:
                return self._by_sentence(sentences)
            if not self._checked:
                self._check(sentences[:_CHECK_SENTENCES])
                if not self.word_level:
                    return self._by_sentence(sentences)
            return self._by_word(sentences)
        finally:
            self.tokenizer.encode_special_tokens = saved

    def _by_sentence(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return _ids_of(self.tokenizer.encode_batch_fast(sentences, add_special_tokens=False))

    def _check(self, sentences: list[str]) -> None:
        self._checked = True
        fast, fast_lengths = self._by_word(sentences)
        ref, ref_lengths = self._by_sentence(sentences)
        if not (np.array_equal(fast, ref) and np.array_equal(fast_lengths, ref_lengths)):
            logging.warning("data: word-level encoding differs from the tokenizer's own on "
                            "this text; encoding sentence by sentence (slower)")
            self.word_level = False

    def _by_word(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        words = [s.split(" ") for s in sentences]
        words_per_sentence = np.fromiter(map(len, words), np.int64, len(words))
        flat = list(itertools.chain.from_iterable(words))
        missing = set(flat).difference(self._index)
        if len(self._index) + len(missing) > self.max_cached_words:
            self._reset()  # bounded memory; frequent words come back within a chunk
            missing = set(flat).difference(self._index)
        if missing:
            self._add(sorted(missing))
        word_rows = np.fromiter(map(self._index.__getitem__, flat), np.int64, len(flat))
        lengths = self._length[word_rows]
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if len(ends) else 0
        # Position in the pool of every output id: its word's offset + its rank in the word.
        source = np.arange(total) + np.repeat(self._offset[word_rows] - (ends - lengths),
                                              lengths)
        word_starts = np.zeros(len(sentences), np.int64)
        np.cumsum(words_per_sentence[:-1], out=word_starts[1:])
        per_sentence = (np.add.reduceat(lengths, word_starts) if len(flat)
                        else np.zeros(len(sentences), np.int64))
        return self._pool[source], per_sentence

    def _add(self, words: list[str]) -> None:
        """Encodes new words (none contains U+0020) and appends them to the cache."""
        groups = [words[i:i + _GROUP_WORDS] for i in range(0, len(words), _GROUP_WORDS)]
        encodings = self.tokenizer.encode_batch([" ".join(g) for g in groups],
                                                add_special_tokens=False)
        ids, lengths = [], []
        for group, encoding in zip(groups, encodings, strict=True):
            # Which word each token came from: its start offset (in characters of the
            # joined string) falls inside that word's span.
            word_start = np.zeros(len(group), np.int64)
            np.cumsum([len(w) + 1 for w in group[:-1]], out=word_start[1:])
            token_start = np.fromiter((o[0] for o in encoding.offsets), np.int64,
                                      len(encoding.ids))
            owner = np.searchsorted(word_start, token_start, side="right") - 1
            ids.append(np.asarray(encoding.ids, np.int32))
            lengths.append(np.bincount(owner, minlength=len(group)))
        lengths_all = np.concatenate(lengths)
        first = len(self._offset)
        self._offset = np.concatenate([self._offset, len(self._pool) + np.cumsum(lengths_all)
                                       - lengths_all])
        self._length = np.concatenate([self._length, lengths_all])
        self._pool = np.concatenate([self._pool, *ids])
        self._index.update(zip(words, range(first, first + len(words)), strict=True))
