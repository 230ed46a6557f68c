"""Tests of input_pipeline: corpus reading, tokenizer, packing, cache, masking, batches.

CPU only, tiny data written to tmp_path (the stdlib corpus is read from this Python).
"""

from __future__ import annotations

import logging
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import ENGLISH_SENTENCES, write_multi_file_corpus

import input_pipeline as ip
from input_pipeline import cache, corpus, ingest, packing, pipeline
from input_pipeline import tokenizer as tokenizer_lib
from input_pipeline.masking import Masker
from input_pipeline.packing import PackedSplit
from input_pipeline.tokenizer import SpecialIds, TokenizedDocs

SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
VOCAB = 1000

# ------------------------------------------------------------------------------------
# Corpus
# ------------------------------------------------------------------------------------


def test_blank_lines_separate_documents(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("first line\nsecond line\n\n\n  third  \n\nfourth")
    docs, replaced = ip.read_text_file(p)
    assert docs == [["first line", "second line"], ["third"], ["fourth"]]
    assert replaced == 0


def test_gutenberg_boilerplate_stripped_with_bom_and_crlf(tmp_path):
    text = (
        "\ufeffThe Project Gutenberg eBook of Foo\r\n"
        "This eBook is for the use of anyone anywhere LICENCEWORD.\r\n\r\n"
        "*** start of the project gutenberg ebook foo ***\r\n\r\n"
        "Produced by Volunteers\r\n\r\n"
        "Chapter one begins here\r\nand continues on this line.\r\n\r\n"
        "Second paragraph.\r\n\r\nEnd of the Project Gutenberg EBook of Foo\r\n\r\n"
        "*** END OF THE PROJECT GUTENBERG EBOOK FOO ***\r\n"
        "Updated editions will replace the previous one FOOTERWORD.\r\n"
    )
    p = tmp_path / "book.txt"
    p.write_bytes(text.encode("utf-8"))
    docs, _ = ip.read_text_file(p)
    # A book is one document; its hard-wrapped lines are joined into paragraphs.
    assert docs == [["Chapter one begins here and continues on this line.", "Second paragraph."]]
    # The START line may be the very first line, right after the BOM.
    p.write_bytes("\ufeff*** START OF THE PROJECT GUTENBERG EBOOK X ***\r\nBody.\r\n".encode())
    assert ip.read_text_file(p)[0] == [["Body."]]


def test_undecodable_bytes_replaced_and_counted(tmp_path, caplog):
    raw = b"caf\xe9 au lait\nok line\n\xff\xfe bad start\n"
    p = tmp_path / "latin1.txt"
    p.write_bytes(raw)
    expected = raw.decode("utf-8", errors="replace").count("\ufffd")
    docs, replaced = ip.read_text_file(p)
    assert replaced == expected == 3
    assert sum(s.count("\ufffd") for d in docs for s in d) == expected
    with caplog.at_level(logging.WARNING):
        docs = ip.TextFiles((str(p),)).documents()
    assert any("latin1.txt" in r.getMessage() and "3 undecodable" in r.getMessage()
               for r in caplog.records)
    assert docs[0][1] == "ok line"


def test_empty_corpus_error_names_the_path(tmp_path):
    pattern = str(tmp_path / "nothing" / "*.txt")
    with pytest.raises(ip.CorpusError, match="no text found in .*nothing/\\*\\.txt"):
        ip.TextFiles((pattern,)).documents()
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n  \n\r\n")
    with pytest.raises(ip.CorpusError, match="no text found in .*empty.txt"):
        ip.parse_corpus_spec(f"{tmp_path}/empty.txt,{tmp_path}/blank.txt").documents()
    with pytest.raises(ip.CorpusError, match="no such file or directory: .*missing.txt"):
        ip.parse_corpus_spec(str(tmp_path / "missing.txt")).documents()
    with pytest.raises(ValueError):  # CorpusError is a ValueError
        ip.build_pretraining_data(pattern, tmp_path / "cache", vocab_size=100,
                                  max_seq_length=32, eval_fraction=0.1)


def test_huge_line_is_split_not_dropped(tmp_path):
    words = [f"word{i % 997}" for i in range(200_000)]  # ~1.4 MB, no newline
    line = " ".join(words)
    p = tmp_path / "long.txt"
    p.write_text(line)
    docs, _ = ip.read_text_file(p, max_line_chars=100_000)
    pieces = [s for d in docs for s in d]  # 'lines' documents end at ~100k characters
    assert len(pieces) > 10 and max(map(len, pieces)) <= 100_000
    assert " ".join(pieces).split() == words  # cut at spaces: no word is broken
    p.write_text("x" * 250_001)  # no whitespace at all: hard cuts
    pieces = [s for d in ip.read_text_file(p, max_line_chars=100_000)[0] for s in d]
    assert [len(s) for s in pieces] == [100_000, 100_000, 50_001]


def test_directories_globs_and_order(tmp_path):
    paths = write_multi_file_corpus(tmp_path / "c")
    (tmp_path / "c" / ".hidden").write_text("secret\n")
    files = ip.TextFiles((str(tmp_path / "c"),)).files
    assert files == sorted(p.resolve() for p in paths)
    both = ip.parse_corpus_spec(f"{paths[2]}, {tmp_path}/c/part[01].txt")
    assert both.files == [paths[2].resolve(), paths[0].resolve(), paths[1].resolve()]


def test_wikitext_layout(tmp_path):
    text = (" \n = Alpha = \n \n Alpha is a letter . \n \n = = History = = \n \n"
            " It is old . \n \n = Beta = \n \n Beta follows alpha . \n")
    p = tmp_path / "wiki.test.raw"
    p.write_text(text)
    assert ip.read_text_file(p)[0] == [["Alpha is a letter .", "It is old ."],
                                       ["Beta follows alpha ."]]


def test_documents_from_hf_dataset():
    import datasets

    rows = ["", " = Alpha = \n", "", " Alpha is a letter . \n", "", " = Beta = \n",
            " Beta follows . \n"]
    ds = datasets.Dataset.from_dict({"text": rows, "id": list(range(len(rows)))})
    assert ip.documents_from_dataset(ds) == [["Alpha is a letter ."], ["Beta follows ."]]
    # Multi-line rows: one document per row.
    ds = datasets.Dataset.from_dict({"content": ["One.\n\nTwo.\n", "Three.", ""]})
    assert ip.documents_from_dataset(ds, "content") == [["One.", "Two."], ["Three."]]
    with pytest.raises(ip.CorpusError, match="no column 'text' .*content"):
        ip.documents_from_dataset(ds)
    with pytest.raises(ip.CorpusError, match="no text found"):
        ip.documents_from_dataset(datasets.Dataset.from_dict({"text": ["", " "]}))


def test_parse_corpus_spec():
    assert isinstance(ip.parse_corpus_spec(None), ip.StdlibDocstrings)
    assert isinstance(ip.parse_corpus_spec("stdlib", max_chars=5), ip.StdlibDocstrings)
    hub = ip.parse_corpus_spec("hf:wikitext:wikitext-103-raw-v1:validation")
    assert hub == ip.HubDataset("wikitext", "wikitext-103-raw-v1", "validation", "text")
    assert ip.parse_corpus_spec("hf:user/data") == ip.HubDataset("user/data", None, "train")
    assert ip.parse_corpus_spec("a.txt, b/*.txt").paths == ("a.txt", "b/*.txt")
    with pytest.raises(ip.CorpusError, match="bad hub spec"):
        ip.parse_corpus_spec("hf:")


@pytest.mark.slow
def test_stdlib_corpus_is_english_and_trains_a_tokenizer(tmp_path):
    docs = ip.StdlibDocstrings().documents()
    chars = sum(len(s) for d in docs for s in d)
    assert chars > 1_000_000 and len(docs) > 300, (chars, len(docs))
    words = Counter(w.lower() for d in docs[:100] for s in d for w in s.split())
    assert {"the", "a", "of", "is"} <= {w for w, _ in words.most_common(20)}
    assert not any("test" in Path(f).parts for f in corpus.stdlib_files())

    small = ip.StdlibDocstrings(max_chars=300_000).documents()
    assert 300_000 <= sum(len(s) for d in small for s in d) < 400_000
    assert small == docs[:len(small)]  # deterministic order
    tok = ip.train_tokenizer(lambda: corpus.iter_sentences(small), 2000, tmp_path / "tok")
    assert tok.get_vocab_size() == 2000
    assert SpecialIds.from_tokenizer(tok) == SpecialIds(0, 1, 2, 3, 4)
    enc = tok.encode("Return the number of items in the list.")
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]" and "[UNK]" not in enc.tokens
    pair = tok.encode("Return the list.", "It is sorted.")
    n_a = pair.tokens.index("[SEP]") + 1
    assert pair.type_ids == [0] * n_a + [1] * (len(pair.tokens) - n_a)
    # Both saved forms load to the same tokenization. (Training itself is not
    # reproducible bit for bit, huggingface/tokenizers#1794: hence the tokenizer cache.)
    assert {p.name for p in (tmp_path / "tok").iterdir()} == {"tokenizer.json", "vocab.txt"}
    from_vocab = ip.load_tokenizer(tmp_path / "tok" / "vocab.txt")
    text = "Copy the Dictionary's keys, unchanged."
    assert from_vocab.encode(text).ids == ip.load_tokenizer(tmp_path / "tok").encode(text).ids


# ------------------------------------------------------------------------------------
# Tokenizer files
# ------------------------------------------------------------------------------------


def test_load_google_style_vocab_and_errors(tmp_path):
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]",
                                                               "[MASK]", "the", "cat", "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = ip.load_tokenizer(tmp_path)
    assert SpecialIds.from_tokenizer(tok) == SpecialIds(0, 100, 101, 102, 103)
    assert tok.encode("The cats").tokens == ["[CLS]", "the", "cat", "##s", "[SEP]"]
    assert tokenizer_lib.continuation_mask(tok)[106] and not tokenizer_lib.continuation_mask(
        tok)[105]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
    with pytest.raises(ip.TokenizerError, match="bad/vocab.txt has no \\[MASK\\]"):
        ip.load_tokenizer(tmp_path / "bad")
    with pytest.raises(ip.TokenizerError, match="no tokenizer.json or vocab.txt at .*nope"):
        ip.load_tokenizer(tmp_path / "nope")


def test_text_spelling_special_tokens_stays_text(tmp_path):
    tok = ip.train_tokenizer(ENGLISH_SENTENCES * 3, 200, lowercase=True)
    docs = ip.tokenize_documents(tok, [["the [MASK] and [SEP] tokens"]])
    assert not np.isin(docs.tokens, list(SpecialIds.from_tokenizer(tok).all[2:])).any()


# ------------------------------------------------------------------------------------
# Packing
# ------------------------------------------------------------------------------------


def synthetic_docs(rng: np.random.Generator, num_docs: int, long_every: int = 7) -> TokenizedDocs:
    """Documents of sentences whose tokens are all distinct (5, 6, 7, ...), some empty
    and some longer than any sequence."""
    doc_sizes = rng.integers(1, 12, num_docs)
    lengths = rng.integers(0, 40, doc_sizes.sum())
    lengths[::long_every] = rng.integers(100, 300, len(lengths[::long_every]))
    sentence_starts = np.concatenate([[0], np.cumsum(lengths)])
    doc_starts = np.concatenate([[0], np.cumsum(doc_sizes)])
    tokens = np.arange(5, 5 + lengths.sum(), dtype=np.int32)
    return TokenizedDocs(tokens, sentence_starts, doc_starts)


def check_rows(split: PackedSplit, pair: bool) -> None:
    L = split.max_seq_length
    for row, types, n in zip(split.input_ids, split.token_type_ids, split.lengths, strict=True):
        assert 3 <= n <= L and row[0] == SPECIAL.cls and row[n - 1] == SPECIAL.sep
        assert (row[n:] == SPECIAL.pad).all() and (types[n:] == 0).all()
        seps = np.flatnonzero(row[:n] == SPECIAL.sep)
        if pair and len(seps) == 2:
            assert (types[:seps[0] + 1] == 0).all() and (types[seps[0] + 1:n] == 1).all()
        else:
            assert len(seps) == 1 and not types.any()


@pytest.mark.parametrize("pair", [False, True])
def test_packing_keeps_every_token_once(pair):
    docs = synthetic_docs(np.random.default_rng(1), 60)
    L = 64
    split = ip.pack_documents(docs, np.arange(docs.num_docs), SPECIAL, L, pair=pair)
    check_rows(split, pair)
    # Content in row order is exactly the token stream: nothing lost, repeated or moved.
    np.testing.assert_array_equal(packing.content_tokens(split, SPECIAL), docs.tokens)
    # Sequences are well filled, documents never share a row, and a sentence that fits
    # a sequence is never cut.
    assert split.lengths.mean() > 0.6 * L
    row_of = np.empty(len(docs.tokens) + 5, int)
    for i, row in enumerate(split.input_ids):
        row_of[row[row > SPECIAL.mask]] = i
    for d in range(docs.num_docs):
        sentences = docs.sentences(d)
        rows_d = {row_of[t] for s in sentences for t in s}
        later = {row_of[t] for s in docs.sentences(d + 1) for t in s} if d + 1 < docs.num_docs \
            else set()
        assert not rows_d & later
        for s in sentences:
            if 0 < len(s) <= L - (3 if pair else 2):
                assert len({row_of[t] for t in s}) == 1


def test_eval_split_is_deterministic_and_disjoint():
    docs = synthetic_docs(np.random.default_rng(2), 50)
    train, held = ip.split_documents(docs.num_docs, 0.1)
    assert len(held) == 5 and not set(train) & set(held)
    assert sorted([*train, *held]) == list(range(50))
    np.testing.assert_array_equal(held, ip.split_documents(50, 0.1)[1])
    # Stratified: every block of ceil(1/f) documents holds out its share, so any prefix
    # of the corpus has the right count (no total needed while streaming).
    for fraction in (0.02, 0.03, 0.25):
        drawn = packing.is_eval_document(np.arange(10_000), fraction)
        for n in (100, 1234, 10_000):
            assert abs(drawn[:n].sum() - fraction * n) < 2, (fraction, n)
    assert not packing.is_eval_document(np.arange(100), 0.0).any()
    # A document's draw does not depend on which others are asked about.
    some = np.array([7, 4242, 99_999])
    np.testing.assert_array_equal(packing.is_eval_document(some, 0.02),
                                  packing.is_eval_document(np.arange(100_000), 0.02)[some])
    a = ip.pack_documents(docs, train, SPECIAL, 32)
    b = ip.pack_documents(docs, held, SPECIAL, 32)
    both = np.concatenate([packing.content_tokens(a, SPECIAL), packing.content_tokens(b, SPECIAL)])
    np.testing.assert_array_equal(np.sort(both), docs.tokens)
    with pytest.raises(ip.InputPipelineError, match="max_seq_length=3"):
        ip.pack_documents(docs, train, SPECIAL, 3, pair=True)


# ------------------------------------------------------------------------------------
# Build + cache
# ------------------------------------------------------------------------------------


def test_build_packs_all_corpus_tokens_and_caches(tmp_path, monkeypatch):
    write_multi_file_corpus(tmp_path / "c", num_files=3, docs_per_file=6)
    spec = str(tmp_path / "c" / "*.txt")
    kwargs = dict(vocab_size=300, max_seq_length=32, eval_fraction=0.2, pair=True)
    data = ip.build_pretraining_data(spec, tmp_path / "cache", **kwargs)
    assert data.special == SpecialIds(0, 1, 2, 3, 4)
    n_train, n_eval = data.meta["num_documents"]
    assert n_train + n_eval == 18 and n_eval in (3, 4) and len(data.eval) > 0
    assert data.train.input_ids.dtype == np.uint16 and data.train.input_ids.shape[1] == 32
    check_rows(data.train, pair=True)
    # Every token of the corpus is in exactly one sequence of train + eval.
    all_tokens = tokenizer_lib.tokenize_documents(
        data.tokenizer, ip.parse_corpus_spec(spec).documents()).tokens
    packed = np.concatenate([packing.content_tokens(s, data.special)
                             for s in (data.train, data.eval)])
    assert Counter(packed.tolist()) == Counter(all_tokens.tolist())

    # Second build: nothing is read or tokenized, the arrays come back equal.
    def fail(*args, **kwargs):
        raise AssertionError("rebuilt although cached")

    monkeypatch.setattr(ingest.SentenceEncoder, "__call__", fail)
    monkeypatch.setattr(tokenizer_lib, "train_tokenizer", fail)
    monkeypatch.setattr(ip.TextFiles, "chunks", fail)
    again = ip.build_pretraining_data(spec, tmp_path / "cache", **kwargs)
    np.testing.assert_array_equal(again.train.input_ids, data.train.input_ids)
    np.testing.assert_array_equal(again.eval.token_type_ids, data.eval.token_type_ids)
    assert again.packed_dir == data.packed_dir
    monkeypatch.undo()

    # A cache entry without its final marker is set aside and rebuilt.
    calls = []
    real = ingest.build_packed_entry
    monkeypatch.setattr(ingest, "build_packed_entry",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(pipeline, "build_packed_entry", ingest.build_packed_entry)
    train_ids = np.array(data.train.input_ids)  # a copy: the arrays are memory maps
    (data.packed_dir / cache.COMPLETE).unlink()
    (data.packed_dir / "train_input_ids.bin").unlink()
    (data.packed_dir / "train_input_ids.bin").write_bytes(b"garbage")
    rebuilt = ip.build_pretraining_data(spec, tmp_path / "cache", **kwargs)
    assert calls == [1] and cache.is_complete(rebuilt.packed_dir)
    assert len(list((tmp_path / "cache").glob("packed-*.damaged-*"))) == 1
    np.testing.assert_array_equal(rebuilt.train.input_ids, train_ids)
    # A changed file changes the key.
    with open(tmp_path / "c" / "part0.txt", "a") as f:
        f.write("\nOne more document.\n")
    changed = ip.build_pretraining_data(spec, tmp_path / "cache", **kwargs)
    assert calls == [1, 1] and changed.packed_dir != data.packed_dir
    assert not [p for p in (tmp_path / "cache").iterdir() if ".tmp-" in p.name]
    assert rebuilt.meta["corpus_identity"] and rebuilt.meta["tokenizer_hash"]


def test_failed_cache_write_leaves_nothing_complete(tmp_path, monkeypatch):
    write_multi_file_corpus(tmp_path / "c")

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # as if the run were interrupted while writing

    monkeypatch.setattr(cache, "append_array", crash)
    with pytest.raises(KeyboardInterrupt):
        ip.build_pretraining_data(str(tmp_path / "c"), tmp_path / "cache", vocab_size=200,
                                  max_seq_length=32, eval_fraction=0.1)
    assert not list((tmp_path / "cache").glob("packed-*"))
    assert not list((tmp_path / "cache").glob(".*tmp-*"))


def test_load_tokenizer_instead_of_training(tmp_path):
    write_multi_file_corpus(tmp_path / "c")
    tok = ip.train_tokenizer(ENGLISH_SENTENCES * 2, 150, tmp_path / "tok")
    data = ip.build_pretraining_data(str(tmp_path / "c"), tmp_path / "cache",
                                     tokenizer=tmp_path / "tok", max_seq_length=16,
                                     eval_fraction=0.1)
    assert data.tokenizer_dir == tmp_path / "tok" and data.vocab_size == tok.get_vocab_size()
    assert not list((tmp_path / "cache").glob("tokenizer-*"))


def test_a_tokenizer_json_that_pads_and_truncates_packs_as_a_plain_one(tmp_path):
    """sentence-transformers' tokenizer.json files (all-MiniLM-L6-v2's among them) pad
    every text to 128 tokens and truncate it: kept, every sentence would be packed as 128
    ids with [PAD]s inside the text. The loader drops both, so such a tokenizer packs the
    corpus exactly as the same vocabulary without them."""
    write_multi_file_corpus(tmp_path / "c")
    plain = ip.train_tokenizer(ENGLISH_SENTENCES * 2, 150, tmp_path / "plain")
    padded = ip.load_tokenizer(tmp_path / "plain")
    padded.enable_padding(length=128)
    padded.enable_truncation(max_length=4)
    (tmp_path / "padded").mkdir()
    (tmp_path / "padded" / "tokenizer.json").write_text(padded.to_str())
    assert len(ip.load_tokenizer(tmp_path / "padded").encode("the cat").ids) == len(
        plain.encode("the cat").ids)

    def packed(tokenizer_dir: str) -> np.ndarray:
        return ip.build_pretraining_data(str(tmp_path / "c"), tmp_path / tokenizer_dir / "cache",
                                         tokenizer=tmp_path / tokenizer_dir, max_seq_length=16,
                                         eval_fraction=0.1).train.input_ids[:]

    np.testing.assert_array_equal(packed("padded"), packed("plain"))


# ------------------------------------------------------------------------------------
# Masking
# ------------------------------------------------------------------------------------


def synthetic_batch(rng: np.random.Generator, b: int, L: int) -> np.ndarray:
    """[CLS] text [SEP] (text [SEP]) [PAD]..: random lengths, a second [SEP] in half the rows."""
    lengths = rng.integers(8, L + 1, b)
    ids = rng.integers(SPECIAL.unk, VOCAB, (b, L)).astype(np.int32)
    ids[ids > SPECIAL.unk] = np.maximum(ids[ids > SPECIAL.unk], 5)  # [UNK] or plain text
    ids[np.arange(L)[None, :] >= lengths[:, None]] = SPECIAL.pad
    ids[:, 0] = SPECIAL.cls
    ids[np.arange(b), lengths - 1] = SPECIAL.sep
    ids[::2][np.arange(0, b, 2) // 2, lengths[::2] // 2] = SPECIAL.sep
    return ids


def test_masking_statistics():
    rng = np.random.default_rng(0)
    ids = synthetic_batch(rng, 2000, 128)
    masker = Masker(SPECIAL, VOCAB, max_predictions=20)
    out = masker(ids, np.random.default_rng(1))
    pos, orig, w = out["masked_positions"], out["masked_ids"], out["masked_weights"]
    assert pos.shape == orig.shape == w.shape == (2000, 20)
    assert (pos.dtype, orig.dtype, w.dtype) == (np.int32, np.int32, np.float32)
    real = w == 1
    rows = np.repeat(np.arange(2000)[:, None], 20, 1)
    # Predictions are at distinct maskable positions and record the original tokens.
    np.testing.assert_array_equal(orig[real], ids[rows[real], pos[real]])
    assert not np.isin(orig[real], [SPECIAL.pad, SPECIAL.cls, SPECIAL.sep]).any()
    assert all(len(set(p[r])) == r.sum() for p, r in zip(pos, real, strict=True))
    assert (pos[~real] == 0).all() and (orig[~real] == 0).all()
    # k = min(P, max(1, round(0.15 n))) per row, about 15% overall.
    maskable = ~np.isin(ids, [SPECIAL.pad, SPECIAL.cls, SPECIAL.sep])
    n = maskable.sum(1)
    np.testing.assert_array_equal(real.sum(1), np.minimum(20, np.maximum(1, np.floor(
        0.15 * n + 0.5))))
    assert abs(real.sum() / n.sum() - 0.15) < 0.005
    # Only predicted positions change; of those 80% [MASK], 10% random, 10% kept.
    changed = out["input_ids"] != ids
    hit = np.zeros_like(changed)
    hit[rows[real], pos[real]] = True
    assert not (changed & ~hit).any()
    new = out["input_ids"][rows[real], pos[real]]
    frac_mask = np.mean(new == SPECIAL.mask)
    frac_kept = np.mean(new == orig[real])
    frac_random = 1 - frac_mask - frac_kept
    assert abs(frac_mask - 0.8) < 0.015 and abs(frac_kept - 0.1) < 0.01, (frac_mask, frac_kept)
    assert abs(frac_random - 0.1) < 0.01
    randoms = new[(new != SPECIAL.mask) & (new != orig[real])]
    assert randoms.min() >= 5 and randoms.max() < VOCAB  # never a special token
    # Uniform over positions: early and late halves of the text masked alike.
    first = (pos[real] < n[rows[real]] / 2 + 1).mean()
    assert abs(first - 0.5) < 0.03


def test_masking_is_deterministic_per_row_generator():
    ids = synthetic_batch(np.random.default_rng(0), 16, 32)
    masker = Masker(SPECIAL, VOCAB, max_predictions=5)
    a = masker(ids, [np.random.default_rng([7, i]) for i in range(16)])
    b = masker(ids[8:], [np.random.default_rng([7, i]) for i in range(8, 16)])
    for key in a:
        np.testing.assert_array_equal(a[key][8:], b[key])


def test_whole_word_masking_masks_words_together():
    rng = np.random.default_rng(3)
    continuation = np.arange(VOCAB) >= 500  # ids 500.. are '##' pieces
    b, L = 1000, 64
    ids = np.zeros((b, L), np.int32)
    word_of = np.full((b, L), -1)
    for i in range(b):
        row, words = [SPECIAL.cls], []
        while True:
            word = [int(rng.integers(5, 500))] + list(rng.integers(500, VOCAB, rng.integers(0, 4)))
            if len(row) + len(word) >= L - 1:
                break
            words.append(range(len(row), len(row) + len(word)))
            row += word
        row.append(SPECIAL.sep)
        ids[i, :len(row)] = row
        for w, span in enumerate(words):
            word_of[i, list(span)] = w
    masker = Masker(SPECIAL, VOCAB, max_predictions=12, whole_word=True,
                    continuation=continuation)
    out = masker(ids, np.random.default_rng(4))
    total = 0
    for i in range(b):
        chosen = out["masked_positions"][i, out["masked_weights"][i] == 1]
        words = set(word_of[i, chosen])
        assert -1 not in words
        expected = {p for p in range(L) if word_of[i, p] in words}
        assert set(chosen) == expected  # all pieces of a chosen word, nothing else
        n = (ids[i] > SPECIAL.mask).sum()
        assert 1 <= len(chosen) <= masker.num_to_mask(n)
        total += len(chosen) / n
    assert 0.12 < total / b <= 0.155  # skipping overshooting words loses a little


# ------------------------------------------------------------------------------------
# Batches
# ------------------------------------------------------------------------------------


def small_split(n: int = 37, L: int = 16) -> PackedSplit:
    ids = synthetic_batch(np.random.default_rng(5), n, L)
    lengths = (ids != SPECIAL.pad).sum(1).astype(np.int32)
    ids[:, 1] = 1000 + np.arange(n)  # a row's own id, to track which sequence is where
    types = np.zeros_like(ids, np.int8)
    return PackedSplit(ids, types, lengths)


def test_batch_is_a_pure_function_of_seed_and_step():
    data = small_split()
    masker = Masker(SPECIAL, 1100, max_predictions=4)
    one = ip.Batcher(data, masker, 8, seed=3)
    two = ip.Batcher(data, masker, 8, seed=3)
    for step in [0, 4, 9, 123, 2]:  # 4 crosses an epoch boundary (37 sequences)
        a, b = one(step), two(step)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(one(0)["input_ids"], one(1)["input_ids"])
    assert not np.array_equal(one(0)["input_ids"], ip.Batcher(data, masker, 8, 4)(0)["input_ids"])
    # Each epoch visits every sequence once.
    first_epoch = np.concatenate([one.indices(s) for s in range(5)])[:37]
    assert sorted(first_epoch) == list(range(37))
    # Resuming at step 5 gives what an uninterrupted run gets at step 5.
    resumed = next(ip.Batcher(data, masker, 8, seed=3).iterate(start_step=5))
    np.testing.assert_array_equal(resumed["masked_positions"], one(5)["masked_positions"])
    batch = one(0)
    assert batch["attention_mask"].sum(1).tolist() == data.lengths[one.indices(0)].tolist()
    assert batch["token_type_ids"].dtype == np.int32


def test_process_shards_concatenate_to_global_batch():
    data = small_split()
    masker = Masker(SPECIAL, 1100, max_predictions=4)
    full = ip.Batcher(data, masker, 12, seed=1).global_batch(7)
    shards = [ip.Batcher(data, masker, 12, seed=1, process_index=p, process_count=4)(7)
              for p in range(4)]
    for key in full:
        np.testing.assert_array_equal(np.concatenate([s[key] for s in shards]), full[key])
    with pytest.raises(ip.InputPipelineError, match="not divisible by process_count=5"):
        ip.Batcher(data, masker, 12, seed=1, process_index=0, process_count=5)


def test_eval_batches_fixed_masks_and_padding():
    data = small_split(n=37)
    masker = Masker(SPECIAL, 1100, max_predictions=4)
    ev = ip.EvalBatches(data, masker, 16, seed=0)
    batches = list(ev)
    assert len(ev) == len(batches) == 3
    assert [b["input_ids"].shape[0] for b in batches] == [16, 16, 16]
    weights = np.concatenate([b["masked_weights"] for b in batches])
    assert weights[37:].sum() == 0 and (weights[:37].sum(1) >= 1).all()
    again = list(ip.EvalBatches(data, masker, 16, seed=0))
    for a, b in zip(batches, again, strict=True):
        np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    # An example's mask does not depend on the batch size or the process split.
    by8 = np.concatenate([b["input_ids"] for b in ip.EvalBatches(data, masker, 8)])
    np.testing.assert_array_equal(by8[:37], np.concatenate([b["input_ids"] for b in batches])[:37])
    shards = [ip.EvalBatches(data, masker, 16, process_index=p, process_count=2).batch(2)
              for p in range(2)]
    np.testing.assert_array_equal(
        np.concatenate([s["masked_weights"] for s in shards]), batches[2]["masked_weights"])
    assert len(ip.EvalBatches(data, masker, 16, num_batches=1)) == 1
    empty = PackedSplit(data.input_ids[:0], data.token_type_ids[:0], data.lengths[:0])
    assert list(ip.EvalBatches(empty, masker, 16)) == []


def test_end_to_end_batches_from_files(tmp_path):
    write_multi_file_corpus(tmp_path / "c")
    data = ip.build_pretraining_data(f"{tmp_path}/c", tmp_path / "cache", vocab_size=200,
                                     max_seq_length=24, eval_fraction=0.25,
                                     max_predictions_per_seq=4, whole_word_mask=True)
    assert data.masker().whole_word and data.masker().max_predictions == 4
    batch = data.batcher(4, seed=0).batch(0)
    assert batch["input_ids"].shape == (4, 24) and batch["masked_ids"].shape == (4, 4)
    assert (batch["input_ids"] == data.special.mask).any()
    evals = data.eval_batches(4)
    assert len(evals) == -(-len(data.eval) // 4) and len(data.eval_batches(4, 1)) == 1
    assert data.vocab_size <= 200 and os.path.isfile(data.tokenizer_dir / "vocab.txt")
    # Rows picked by process_rows equal a process-local batcher's batch.
    rows = ip.process_rows(4, 1, 2)
    local = data.batcher(4, seed=0, process_index=1, process_count=2).batch(3)
    np.testing.assert_array_equal(data.batcher(4, seed=0).batch(3, rows)["input_ids"],
                                  local["input_ids"])
    np.testing.assert_array_equal(evals.batch(0, rows)["masked_ids"],
                                  evals.batch(0)["masked_ids"][2:])


def test_from_config_reads_the_data_block(tmp_path):
    from types import SimpleNamespace

    write_multi_file_corpus(tmp_path / "c")
    cfg = SimpleNamespace(corpus=str(tmp_path / "c"), text_column="text",
                          max_corpus_chars=None, tokenizer=None, vocab_size=150,
                          lowercase=True, max_seq_length=20, sentence_pairs=True,
                          max_predictions_per_seq=3, mask_prob=0.2, whole_word_mask=False,
                          eval_fraction=0.1, cache_dir=None, tokenizer_sample=1.0)
    data = ip.from_config(cfg, tmp_path / "work")
    assert data.packed_dir.parent == tmp_path / "work" / "data_cache"
    assert data.max_seq_length == 20 and data.meta["pair"] and data.meta["eval_fraction"] == 0.1
    assert (data.max_predictions, data.mask_prob) == (3, 0.2)
    assert data.train.token_type_ids.max() == 1


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
