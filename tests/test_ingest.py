"""Streaming ingest: corpus chunks -> word-cached encoding -> packing -> uint16 cache, and
the pipeline's bad-input cases (issue 11 items 11 and 14, issue 12, issue 13 item 2).

Tiny corpora in tmp_path; every test runs in a few seconds.
"""

from __future__ import annotations

import logging
import struct

import numpy as np
import pytest

import input_pipeline as ip
from input_pipeline.encoding import SentenceEncoder

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "All that glitters is not gold, and not all those who wander are lost.",
    "The function returns a list of the items in the order they were added.",
    "It was the best of times, it was the worst of times.",
    "Call me Ishmael. Some years ago I went to sea to see the watery part of the world.",
]


def sentence_lines(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [SENTENCES[int(i)] + f" Line {k}." for k, i in
            enumerate(rng.integers(0, len(SENTENCES), n))]


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# ------------------------------------------------------------------------------------
# Input that is not a corpus (issue 11 item 14)
# ------------------------------------------------------------------------------------


def fake_executable() -> bytes:
    """An ELF header followed by code-like bytes: many NULs, few valid UTF-8 runs."""
    rng = np.random.default_rng(0)
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHI", 2, 62, 1) + bytes(40)
    body = rng.integers(0, 256, 50_000, dtype=np.uint8)
    body[rng.random(50_000) < 0.3] = 0
    return header + body.tobytes() + b"\nGCC: (GNU) 13.2.0\n"


@pytest.mark.parametrize("kind", ["executable", "random bytes", "utf-16"])
def test_a_corpus_file_that_is_not_text_is_one_error_naming_it(tmp_path, kind):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("\n".join(sentence_lines(50)) + "\n")
    bad = tmp_path / "c" / "b.bin"
    if kind == "executable":
        bad.write_bytes(fake_executable())
    elif kind == "random bytes":
        bad.write_bytes(np.random.default_rng(1).integers(128, 256, 40_000, np.uint8).tobytes())
    else:
        bad.write_bytes("\n".join(sentence_lines(50)).encode("utf-16"))
    with pytest.raises(ip.CorpusError, match=r"b\.bin.* not UTF-8 text") as err:
        ip.build_pretraining_data(str(tmp_path / "c"), tmp_path / "cache", vocab_size=200,
                                  max_seq_length=32, eval_fraction=0.1)
    assert "\n" not in str(err.value)
    assert not list((tmp_path / "cache").glob("packed-*"))


def test_a_few_bad_bytes_in_a_text_file_still_count_as_text(tmp_path, caplog):
    text = "\n".join(sentence_lines(200)).encode() + b"\ncaf\xe9 au lait, na\xefve\n"
    (tmp_path / "latin.txt").write_bytes(text)
    with caplog.at_level(logging.WARNING):
        docs = ip.parse_corpus_spec(str(tmp_path / "latin.txt")).documents()
    assert docs[-1][-1] == "caf\ufffd au lait, na\ufffdve"
    assert any("latin.txt" in m and "2 undecodable" in m for m in messages(caplog))


# ------------------------------------------------------------------------------------
# Streaming (issue 12)
# ------------------------------------------------------------------------------------


TRICKY = [
    "Plain words, punctuation; and (brackets)!",
    "  double  spaces   and trailing ",
    "tabs\tinside\tand a\u00a0no-break space, e\u0301 combining, na\u00efve caf\u00e9",
    "CJK \u6771\u4eac\u90fd and emoji \U0001F600 and zero\u200bwidth",
    "text that spells [MASK] and [SEP] and [CLS]",
    "control\x07char and \ufffd replacement",
    "x" * 150 + " a word longer than WordPiece's 100-character limit",
    "",
]


def test_sentence_encoder_equals_the_tokenizer():
    tok = ip.train_tokenizer(SENTENCES * 5 + TRICKY * 5, 300)
    encoder = SentenceEncoder(tok)
    assert encoder.word_level
    reference = ip.tokenize_documents(tok, [TRICKY, SENTENCES])
    ids, lengths = encoder(TRICKY + SENTENCES)
    np.testing.assert_array_equal(ids, reference.tokens)
    np.testing.assert_array_equal(lengths, np.diff(reference.sentence_starts))
    # Again from the cache only, and after the cache was reset for its size.
    small = SentenceEncoder(tok, max_cached_words=20)
    for _ in range(2):
        ids, _ = small(TRICKY + SENTENCES)
        np.testing.assert_array_equal(ids, reference.tokens)
    assert not tok.encode_special_tokens  # the caller's tokenizer is left as it was


def test_sentence_encoder_falls_back_for_tokenizers_that_join_across_spaces():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # Byte-level BPE keeps the space inside tokens ("Ġword"): not word-separable.
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(SENTENCES * 5, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    encoder = SentenceEncoder(tok)
    assert not encoder.word_level
    ids, lengths = encoder(SENTENCES)
    expected = [e.ids for e in tok.encode_batch(SENTENCES, add_special_tokens=False)]
    assert ids.tolist() == [i for e in expected for i in e]
    assert lengths.tolist() == [len(e) for e in expected]


