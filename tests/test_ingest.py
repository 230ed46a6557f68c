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


