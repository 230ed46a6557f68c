"""squad/: a predicted span is widened to whole words of the original context (BERT's
basic-tokenizer words: punctuation and CJK characters are words of their own), through a
tiny WordPiece vocabulary and the project's tokenizer, windows and decoding; and a
question id in both train and dev is one leakage warning."""

from __future__ import annotations

import json

import ml_collections
import numpy as np
import pytest

import squad
from input_pipeline import load_tokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "sk", "##erry", "cormoran",
         "##t", "sank", "off", "gull", "rock", ".", "s", "##ven", "dahl", "r", "##ø",
         "##ald", "caf", "##e", "“", "”", "(", ")", "'", "东", "京", "是", "首", "都",
         "what", "?", "is", "it"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    directory = tmp_path_factory.mktemp("vocab")
    (directory / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
    return load_tokenizer(str(directory))  # BERT uncased: lower case, accents stripped


def _logits(tokenizer, examples, spans):
    """Windows of `examples` and logits pointing at the context tokens spans[i] =
    (first, last): each a token string, or (token string, occurrence)."""
    windows = squad.make_windows(tokenizer, examples, max_seq_length=48, doc_stride=16,
                                 max_query_length=8, training=False)
    assert len(windows) == len(examples)  # one window each: row i is example i
    start = np.zeros(windows.offsets.shape[:2], np.float32)
    end = start.copy()
    for i, (example, (first, last)) in enumerate(zip(examples, spans, strict=True)):
        encoding = tokenizer.encode(example.context, add_special_tokens=False)
        context_rows = np.nonzero(windows.offsets[i, :, 0] >= 0)[0]
        assert len(context_rows) == len(encoding.tokens)

        def row(piece, tokens=encoding.tokens, rows=context_rows):
            piece, occurrence = piece if isinstance(piece, tuple) else (piece, 0)
            return rows[[j for j, t in enumerate(tokens) if t == piece][occurrence]]
        start[i, row(first)] = end[i, row(last)] = 10.0
    return windows, start, end


def _answer(tokenizer, context, first, last, whole_words=True):
    example = squad.SquadExample("q", "t", "what is it ?", context,
                                 (squad.Answer(context[:1], 0),))
    windows, start, end = _logits(tokenizer, [example], [(first, last)])
    return squad.best_answers([example], windows, start, end,
                              whole_words=whole_words)["q"]


def test_the_tiny_vocabulary_cuts_words_into_pieces(tokenizer):
    encoding = tokenizer.encode("Skerry Cormorant Sven Røald café", add_special_tokens=False)
    assert encoding.tokens == ["sk", "##erry", "cormoran", "##t", "s", "##ven", "r", "##ø",
                               "##ald", "caf", "##e"]


@pytest.mark.parametrize("context, first, last, cut, whole", [
    # one piece of a word predicted: the whole word
    ("The Skerry lies north.", "sk", "sk", "Sk", "Skerry"),
    ("The Skerry lies north.", "##erry", "##erry", "erry", "Skerry"),
    # a span from the last piece of "Cormorant", ending before the sentence's "."
    ("The Cormorant sank off Gull Rock.", "##t", "rock", "t sank off Gull Rock",
     "Cormorant sank off Gull Rock"),
    ("The Cormorant sank off Gull Rock.", "cormoran", "cormoran", "Cormoran", "Cormorant"),
    ("Sven Dahl", "##ven", "dahl", "ven Dahl", "Sven Dahl"),
    # accented words: pieces of "Røald" and "café" (é is stripped to e, offsets keep it)
    ("Røald Dahl", "##ald", "dahl", "ald Dahl", "Røald Dahl"),
    ("Røald Dahl", "##ø", "##ø", "ø", "Røald"),
    ("the café", "caf", "caf", "caf", "café"),
    # a decomposed é: the tokenizer drops the combining accent from ##e's offsets
    ("the cafe\u0301", "##e", "##e", "e", "cafe\u0301"),
])
def test_a_span_inside_a_word_is_widened_to_the_whole_word(tokenizer, context, first, last,
                                                           cut, whole):
    assert _answer(tokenizer, context, first, last, whole_words=False) == cut
    assert _answer(tokenizer, context, first, last) == whole


@pytest.mark.parametrize("context, first, last, answer", [
    # punctuation is a word of its own: never added, kept when predicted
    ("off Gull Rock.", "gull", "rock", "Gull Rock"),
    ("off Gull Rock.", "gull", ".", "Gull Rock."),
    ("the “café” sank", "caf", "##e", "café"),
    ("the “café” sank", "“", "”", "“café”"),
    ("the “café” sank", "“", "caf", "“café"),
    ("(Dahl) sank", "dahl", "dahl", "Dahl"),
    ("(Dahl) sank", "(", "dahl", "(Dahl"),
    ("(Dahl) sank", "dahl", ")", "Dahl)"),
    ("Dahl's rock", "dahl", "dahl", "Dahl"),  # BERT splits at the apostrophe
    # CJK characters are words of their own: never extended over a neighbour
    ("东京是首都", "京", "京", "京"),
    ("东京是首都", "京", "是", "京是"),
    ("东京cafe是首都", "caf", "caf", "cafe"),  # a Latin word between CJK characters
    ("东京cafe是首都", "京", "caf", "京cafe"),
])
def test_punctuation_and_cjk_characters_are_words_of_their_own(tokenizer, context, first,
                                                              last, answer):
    assert _answer(tokenizer, context, first, last) == answer


def test_word_span_on_hand_written_offsets():
    text = "The Cormorant sank off Gull Rock."
    assert squad.word_span(text, 12, 18) == (4, 18)  # "t sank" -> "Cormorant sank"
    rock = text.index("Rock")
    assert squad.word_span(text, rock, rock + 4) == (rock, rock + 4)  # the "." stays out
    assert squad.word_span(text, rock + 1, rock + 2) == (rock, rock + 4)  # "o" -> "Rock"
    assert squad.word_span(text, 32, 33) == (32, 33)  # "." alone
    assert squad.word_span(text, 5, 6) == (4, 13)  # "o" inside "Cormorant"
    assert squad.word_span("a  b", 1, 3) == (1, 3)  # whitespace at both ends: unchanged
    assert squad.word_span("東京", 1, 2) == (1, 2)  # a CJK compatibility/unified ideograph
    assert squad.word_span(text, 3, 3) == (3, 3)  # empty: unchanged


def test_exact_match_and_f1_of_a_tiny_prediction_set(tokenizer):
    context = "The Skerry: the Cormorant sank off Gull Rock (Dahl)."
    cases = [("Skerry", ("sk", "sk")),  # cut "Sk": EM 0, F1 0 -> "Skerry": 1, 1
             ("Cormorant sank", ("##t", "sank")),  # "t sank": EM 0, F1 1/2 -> 1, 1
             ("Gull Rock", ("gull", "rock")),  # whole words already: 1, 1 both ways
             ("Dahl", ("dahl", "dahl"))]  # "(Dahl)." around it: "Dahl" both ways
    examples = [squad.SquadExample(f"q{i}", "t", "what is it ?", context,
                                   (squad.Answer(gold, context.index(gold)),))
                for i, (gold, _) in enumerate(cases)]
    windows, start, end = _logits(tokenizer, examples, [span for _, span in cases])
    golds = squad.gold_answers(examples)
    cut = squad.best_answers(examples, windows, start, end, whole_words=False)
    assert list(cut.values()) == ["Sk", "t sank", "Gull Rock", "Dahl"]
    scores = squad.evaluate(golds, cut)
    assert scores["exact_match"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(100 * (0 + 0.5 + 1 + 1) / 4)
    whole = squad.best_answers(examples, windows, start, end)
    assert list(whole.values()) == ["Skerry", "Cormorant sank", "Gull Rock", "Dahl"]
    scores = squad.evaluate(golds, whole)
    assert scores["exact_match"] == 100.0 and scores["f1"] == 100.0


# -- train/dev leakage ------------------------------------------------------------------
def _write_split(directory, name, ids):
    context = "the river of rome is wide ."
    document = {"version": "1.1", "data": [{"title": "Rome", "paragraphs": [
        {"context": context, "qas": [
            {"id": qid, "question": "how is it ?",
             "answers": [{"text": "wide", "answer_start": 21}]} for qid in ids]}]}]}
    (directory / name).write_text(json.dumps(document), encoding="utf-8")


def _warnings(capsys):
    return [line for line in capsys.readouterr().out.splitlines() if "warning" in line]


def test_ids_in_both_train_and_dev_are_one_warning(tmp_path, capsys):
    from tasks.squad_task import TASK

    read_questions = TASK.read

    _write_split(tmp_path, "train-v1.1.json", ["a", "b", "c", "d", "e", "f"])
    _write_split(tmp_path, "dev-v1.1.json", ["x", "f", "e", "d", "c", "y"])
    config = ml_collections.ConfigDict({"squad_dir": str(tmp_path), "max_train_examples": 0})
    train, dev = read_questions(config)  # as eval_squad.py reads them
    (line,) = _warnings(capsys)
    assert line.startswith("warning: ")
    assert str(tmp_path / "train-v1.1.json") in line and str(tmp_path / "dev-v1.1.json") in line
    assert "4 question ids" in line and "leakage" in line
    assert "'f', 'e', 'd', ..." in line and "'c'" not in line  # a few, in dev's order
    assert len(train) == 6 and len(dev) == 6  # warned, not refused


def test_disjoint_splits_do_not_warn(tmp_path, capsys):
    from tasks.squad_task import TASK

    read_questions = TASK.read

    _write_split(tmp_path, "train-v1.1.json", ["a", "b"])
    _write_split(tmp_path, "dev-v1.1.json", ["x", "y"])
    read_questions(ml_collections.ConfigDict({"squad_dir": str(tmp_path),
                                              "max_train_examples": 0}))
    assert _warnings(capsys) == []


def test_warn_shared_ids_on_loaded_splits(capsys):
    def loaded(ids, source):
        return squad.Loaded([squad.SquadExample(q, "t", "q ?", "c", (squad.Answer("c", 0),))
                             for q in ids], 0, 0, source)

    assert squad.warn_shared_ids(loaded(["a", "b"], "hub train"),
                                 loaded(["b"], "hub validation")) == 1
    (line,) = _warnings(capsys)
    assert "hub train and hub validation: 1 question ids" in line and "('b')" in line
    assert squad.warn_shared_ids(loaded(["a"], "s"), loaded(["b"], "s")) == 0
    assert _warnings(capsys) == []
