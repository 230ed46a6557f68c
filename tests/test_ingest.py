"""Streaming ingest: corpus chunks -> word-cached encoding -> packing -> uint16 cache, and
the pipeline's bad-input cases (issue 11 items 11 and 14, issue 12, issue 13 item 2).

Tiny corpora in tmp_path; every test runs in a few seconds.
"""

from __future__ import annotations

import inspect
import logging
import os
import struct
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import ENGLISH_SENTENCES

import input_pipeline as ip
from input_pipeline import ingest, packing
from input_pipeline.encoding import SentenceEncoder
from input_pipeline.tokenizer import SpecialIds


def sentence_lines(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [ENGLISH_SENTENCES[int(i)] + f" Line {k}." for k, i in
            enumerate(rng.integers(0, len(ENGLISH_SENTENCES), n))]


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def packed_tokens(data: ip.PretrainingData) -> Counter:
    return Counter(np.concatenate([packing.content_tokens(s, data.special)
                                   for s in (data.train, data.eval)]).tolist())


# ------------------------------------------------------------------------------------
# Eval split of corpora with few documents (issue 11 item 11)
# ------------------------------------------------------------------------------------


def test_file_without_blank_lines_still_has_an_eval_split(tmp_path):
    path = tmp_path / "one_sentence_per_line.txt"
    path.write_text("\n".join(sentence_lines(3000)) + "\n")  # ~200 KB, not one blank line
    data = ip.build_pretraining_data(str(path), tmp_path / "cache", vocab_size=300,
                                     max_seq_length=64, eval_fraction=0.05)
    n_train, n_eval = len(data.train), len(data.eval)
    assert n_eval > 0 and n_train > 0
    assert 0.01 < n_eval / (n_train + n_eval) < 0.2, (n_train, n_eval)
    # Nothing dropped or repeated by the split.
    docs = ip.parse_corpus_spec(str(path)).documents()
    expected = ip.tokenize_documents(data.tokenizer, docs).tokens
    assert packed_tokens(data) == Counter(expected.tolist())


@pytest.mark.parametrize("text", [
    # One short paragraph-per-line file: a single document however it is cut.
    "\n".join(sentence_lines(40)),
    # One Project Gutenberg book: one document by design (paragraphs layout).
    "*** START OF THE PROJECT GUTENBERG EBOOK X ***\n\n" + "\n\n".join(
        " ".join(sentence_lines(4, seed)) for seed in range(60)) + "\n",
], ids=["lines", "gutenberg book"])
def test_a_single_document_corpus_gets_a_nonempty_eval_split(tmp_path, text):
    path = tmp_path / "single.txt"
    path.write_text(text)
    data = ip.build_pretraining_data(str(path), tmp_path / "cache", vocab_size=300,
                                     max_seq_length=32, eval_fraction=0.1)
    assert len(data.train) > 0 and len(data.eval) > 0
    no_eval = ip.build_pretraining_data(str(path), tmp_path / "cache", vocab_size=300,
                                        max_seq_length=32, eval_fraction=0.0)
    assert len(no_eval.eval) == 0
    assert packed_tokens(data) == packed_tokens(no_eval)


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


def test_training_split_smaller_than_a_batch_warns_with_the_counts(caplog):
    ids = np.zeros((5, 8), np.int32)
    ids[:, 0], ids[:, 1:6], ids[:, 6] = 2, 7, 3
    split = ip.PackedSplit(ids, np.zeros_like(ids, np.int8), np.full(5, 7, np.int32))
    masker = ip.Masker(SpecialIds(0, 1, 2, 3, 4), 50, max_predictions=2)
    with caplog.at_level(logging.WARNING):
        batcher = ip.Batcher(split, masker, 32, seed=0)
    warned = [m for m in messages(caplog) if "5" in m and "32" in m]
    assert len(warned) == 1, messages(caplog)
    assert batcher.batch(0)["input_ids"].shape == (32, 8)  # still works, rows repeat
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        ip.Batcher(split, masker, 4, seed=0)
    assert not messages(caplog)


# ------------------------------------------------------------------------------------
# One source of defaults (issue 13 item 2)
# ------------------------------------------------------------------------------------


CONFIG_TO_ARG = {
    "vocab_size": "vocab_size", "max_seq_length": "max_seq_length",
    "sentence_pairs": "pair", "eval_fraction": "eval_fraction", "tokenizer": "tokenizer",
    "lowercase": "lowercase", "max_corpus_chars": "max_chars", "text_column": "text_column",
    "max_predictions_per_seq": "max_predictions_per_seq", "mask_prob": "mask_prob",
    "whole_word_mask": "whole_word_mask",
}


def test_from_config_passes_the_config_values_and_has_no_defaults(tmp_path, monkeypatch):
    from configs import pretrain

    data_config = pretrain.get_config().data
    seen = {}

    def fake_build(corpus_spec, cache_dir, **kwargs):
        seen.update(kwargs, corpus_spec=corpus_spec, cache_dir=cache_dir)
        return "built"

    monkeypatch.setattr("input_pipeline.pipeline.build_pretraining_data", fake_build)
    assert ip.from_config(data_config, tmp_path) == "built"
    for field, arg in CONFIG_TO_ARG.items():
        assert seen[arg] == data_config[field], field
    assert Path(seen["cache_dir"]) == tmp_path / "data_cache"

    # A config block without a field is an error naming it, not a silent default.
    partial = SimpleNamespace(**{k: v for k, v in data_config.items() if k != "eval_fraction"})
    with pytest.raises(ip.InputPipelineError, match="data.eval_fraction"):
        ip.from_config(partial, tmp_path)

    # Defaults of build_pretraining_data never disagree with configs/pretrain.py; the
    # vocabulary size may only be left out when a tokenizer is given.
    params = inspect.signature(ip.build_pretraining_data).parameters
    for field, arg in CONFIG_TO_ARG.items():
        default = params[arg].default
        if default is not inspect.Parameter.empty and arg != "vocab_size":
            assert default == data_config[field], (arg, default, data_config[field])
    assert params["vocab_size"].default in (None, inspect.Parameter.empty)
    (tmp_path / "c.txt").write_text("\n".join(sentence_lines(20)))
    with pytest.raises(ip.InputPipelineError, match="vocab_size"):
        ip.build_pretraining_data(str(tmp_path / "c.txt"), tmp_path / "cache",
                                  max_seq_length=32, eval_fraction=0.1)


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
    tok = ip.train_tokenizer(ENGLISH_SENTENCES * 5 + TRICKY * 5, 300)
    encoder = SentenceEncoder(tok)
    assert encoder.word_level
    reference = ip.tokenize_documents(tok, [TRICKY, ENGLISH_SENTENCES])
    ids, lengths = encoder(TRICKY + ENGLISH_SENTENCES)
    np.testing.assert_array_equal(ids, reference.tokens)
    np.testing.assert_array_equal(lengths, np.diff(reference.sentence_starts))
    # Again from the cache only, and after the cache was reset for its size.
    small = SentenceEncoder(tok, max_cached_words=20)
    for _ in range(2):
        ids, _ = small(TRICKY + ENGLISH_SENTENCES)
        np.testing.assert_array_equal(ids, reference.tokens)
    assert not tok.encode_special_tokens  # the caller's tokenizer is left as it was


def test_sentence_encoder_falls_back_for_tokenizers_that_join_across_spaces():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # Byte-level BPE keeps the space inside tokens ("Ġword"): not word-separable.
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(ENGLISH_SENTENCES * 5, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    encoder = SentenceEncoder(tok)
    assert not encoder.word_level
    ids, lengths = encoder(ENGLISH_SENTENCES)
    expected = [e.ids for e in tok.encode_batch(ENGLISH_SENTENCES, add_special_tokens=False)]
    assert ids.tolist() == [i for e in expected for i in e]
    assert lengths.tolist() == [len(e) for e in expected]


def test_chunks_cover_the_corpus_and_their_size_does_not_change_the_cache(tmp_path):
    (tmp_path / "c").mkdir()
    for f in range(3):
        docs = ["\n".join(sentence_lines(int(n), seed=f * 100 + d))
                for d, n in enumerate(np.random.default_rng(f).integers(1, 30, 40))]
        (tmp_path / "c" / f"part{f}.txt").write_text("\n\n".join(docs) + "\n")
    source = ip.parse_corpus_spec(str(tmp_path / "c"))
    chunks = list(source.chunks(chunk_chars=3000))
    assert len(chunks) > 10 and max(sum(map(len, c.sentences)) for c in chunks) < 3000 + 200
    doc_ids = np.concatenate([c.doc_ids for c in chunks])
    assert (np.diff(doc_ids) >= 0).all() and doc_ids[0] == 0
    assert [s for c in chunks for s in c.sentences] == [s for d in source.documents()
                                                        for s in d]
    assert doc_ids[-1] + 1 == len(source.documents()) == 120

    tok_dir = tmp_path / "tok"
    ip.train_tokenizer(lambda: (c.sentences for c in chunks), 300, tok_dir)
    built = [ip.build_pretraining_data(str(tmp_path / "c"), tmp_path / f"cache{n}",
                                       tokenizer=tok_dir, max_seq_length=48, pair=True,
                                       eval_fraction=0.1, chunk_chars=n)
             for n in (500, 1 << 20)]
    for name in ("train", "eval"):
        for field in ("input_ids", "token_type_ids", "lengths"):
            np.testing.assert_array_equal(getattr(getattr(built[0], name), field),
                                          getattr(getattr(built[1], name), field))


def test_build_streams_without_listing_the_corpus(tmp_path, monkeypatch):
    (tmp_path / "c.txt").write_text("\n\n".join("\n".join(sentence_lines(5, seed=d))
                                                for d in range(50)))

    def listed(*args, **kwargs):
        raise AssertionError("the whole corpus was gathered into a list")

    monkeypatch.setattr(ip.TextFiles, "documents", listed)
    monkeypatch.setattr("input_pipeline.documents.group_documents", listed)
    monkeypatch.setattr("input_pipeline.corpus.group_documents", listed)
    monkeypatch.setattr(ip.tokenizer, "tokenize_documents", listed)
    data = ip.build_pretraining_data(str(tmp_path / "c.txt"), tmp_path / "cache",
                                     vocab_size=300, max_seq_length=32, eval_fraction=0.1,
                                     chunk_chars=2000)
    assert len(data.train) and len(data.eval)


def test_ids_stored_as_uint16_and_batches_unchanged(tmp_path):
    (tmp_path / "c.txt").write_text("\n\n".join("\n".join(sentence_lines(6, seed=d))
                                                for d in range(40)))
    data = ip.build_pretraining_data(str(tmp_path / "c.txt"), tmp_path / "cache",
                                     vocab_size=300, max_seq_length=32, eval_fraction=0.1)
    assert data.train.input_ids.dtype == np.uint16 and data.meta["token_dtype"] == "uint16"
    as_int32 = ip.PackedSplit(np.array(data.train.input_ids, np.int32),
                              np.array(data.train.token_type_ids),
                              np.array(data.train.lengths))
    masker = data.masker()
    for step in (0, 3):
        a = ip.Batcher(data.train, masker, 8, seed=1).batch(step)
        b = ip.Batcher(as_int32, masker, 8, seed=1).batch(step)
        for key in a:
            assert a[key].dtype == b[key].dtype, key
            np.testing.assert_array_equal(a[key], b[key])
        assert a["input_ids"].dtype == np.int32 and a["masked_ids"].dtype == np.int32
    evals = data.eval_batches(4)
    assert evals.batch(0)["input_ids"].dtype == np.int32
    assert ip.packing.token_dtype(65536) == np.uint16
    assert ip.packing.token_dtype(65537) == np.int32


@pytest.mark.slow
def test_worker_processes_give_the_same_cache(tmp_path, monkeypatch):
    (tmp_path / "c.txt").write_text("\n\n".join("\n".join(sentence_lines(8, seed=d))
                                                for d in range(150)))
    tok_dir = tmp_path / "tok"
    ip.train_tokenizer(ENGLISH_SENTENCES * 5, 300, tok_dir)
    started = []
    real = ingest._Workers.__init__

    def counting(self, count, *args):
        started.append(count)
        real(self, count, *args)

    monkeypatch.setattr(ingest._Workers, "__init__", counting)
    built = [ip.build_pretraining_data(str(tmp_path / "c.txt"), tmp_path / f"cache{w}",
                                       tokenizer=tok_dir, max_seq_length=32,
                                       eval_fraction=0.1, chunk_chars=2000, workers=w)
             for w in (1, 2)]
    assert started == [2]  # in-process for workers=1; two workers after the first chunks
    for name in ("train", "eval"):
        for field in ("input_ids", "token_type_ids", "lengths"):
            np.testing.assert_array_equal(getattr(getattr(built[0], name), field),
                                          getattr(getattr(built[1], name), field))


def test_tokenizer_trained_on_a_sample_of_the_chunks(tmp_path, monkeypatch):
    (tmp_path / "c.txt").write_text("\n\n".join("\n".join(sentence_lines(8, seed=d))
                                                for d in range(100)))
    seen = []
    real = ip.tokenizer.train_tokenizer

    def spy(chunks, *args, **kwargs):
        passes = []

        def counted():  # counts the chunks of the first of the trainer's two passes
            passes.append(1)
            for c in chunks():
                if len(passes) == 1:
                    seen.append(len(c))
                yield c
        return real(counted, *args, **kwargs)

    monkeypatch.setattr(ip.tokenizer, "train_tokenizer", spy)
    kwargs = dict(vocab_size=300, max_seq_length=32, eval_fraction=0.1, chunk_chars=1000)
    full = ip.build_pretraining_data(str(tmp_path / "c.txt"), tmp_path / "cache", **kwargs)
    n_full = len(seen)
    seen.clear()
    sampled = ip.build_pretraining_data(str(tmp_path / "c.txt"), tmp_path / "cache",
                                        tokenizer_sample=0.25, **kwargs)
    assert abs(len(seen) - n_full / 4) < 2 and sampled.tokenizer_dir != full.tokenizer_dir
    assert packed_tokens(sampled) and len(sampled.eval)
    with pytest.raises(ip.InputPipelineError, match="tokenizer_sample=0"):
        ip.build_pretraining_data(str(tmp_path / "c.txt"), tmp_path / "c2",
                                  tokenizer_sample=0.0, **kwargs)


def test_a_corpus_in_another_encoding_reads_with_data_encoding(tmp_path):
    """latin-1 text is refused as not UTF-8 with a line that names data.encoding, and read
    whole with it; the encoding is part of the corpus identity (cache key, resume check)."""
    lines = [f"Le café numéro {i} est à côté de la gare, très élégant." for i in range(300)]
    (tmp_path / "latin.txt").write_bytes("\n".join(lines).encode("latin-1") + b"\n")
    spec = str(tmp_path / "latin.txt")
    with pytest.raises(ip.CorpusError, match=r"latin\.txt is not UTF-8 text .*set "
                                             r"data\.encoding \(e\.g\. --config\.data\.encoding"):
        ip.parse_corpus_spec(spec).documents()
    docs = ip.parse_corpus_spec(spec, encoding="latin-1").documents()
    assert docs[0][0] == lines[0]
    assert ip.parse_corpus_spec(spec, encoding="latin-1").identity() != ip.parse_corpus_spec(
        spec).identity()
    assert ip.parse_corpus_spec(spec, encoding="iso-8859-1").identity() == ip.parse_corpus_spec(
        spec, encoding="latin-1").identity()  # one codec, two names
    with pytest.raises(ip.CorpusError, match="data.encoding='klingon' is not a text encoding"):
        ip.parse_corpus_spec(spec, encoding="klingon").documents()


def test_the_corpus_identity_follows_the_bytes_not_the_file_times_or_place(tmp_path):
    """A corpus copied to another disk or session (new times, another directory) is the
    same text, so its cache and its runs' resumes still hold; a file edited in place with
    its size and time kept is another text, and the identity must change (it decides the
    cache key and the resume check)."""
    first = tmp_path / "a" / "corpus"
    first.mkdir(parents=True)
    for name in ("one.txt", "two.txt"):
        (first / name).write_text("\n".join(sentence_lines(50, seed=len(name))) + "\n")
    identity = ip.parse_corpus_spec(str(first)).identity()

    copy = tmp_path / "b" / "corpus"
    copy.mkdir(parents=True)
    for name in ("one.txt", "two.txt"):
        (copy / name).write_bytes((first / name).read_bytes())
        os.utime(copy / name, ns=(1, 10**18))  # another time than the original's
    assert ip.parse_corpus_spec(str(copy)).identity() == identity

    edited = first / "one.txt"
    stat = edited.stat()
    text = edited.read_bytes()
    edited.write_bytes(text.replace(b"Line 1.", b"Line 7.", 1))  # same size
    os.utime(edited, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert edited.stat().st_size == stat.st_size
    assert ip.parse_corpus_spec(str(first)).identity() != identity


def test_the_stdlib_corpus_identity_follows_the_bytes(tmp_path):
    root = tmp_path / "lib"
    root.mkdir()
    (root / "mod.py").write_text('"""A module docstring that says something."""\n')
    identity = ip.StdlibDocstrings(root=str(root)).identity()
    os.utime(root / "mod.py", ns=(1, 10**18))
    assert ip.StdlibDocstrings(root=str(root)).identity() == identity
    (root / "mod.py").write_text('"""A module docstring that says somethinG."""\n')
    os.utime(root / "mod.py", ns=(1, 10**18))
    assert ip.StdlibDocstrings(root=str(root)).identity() != identity
