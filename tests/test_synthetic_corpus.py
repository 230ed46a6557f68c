"""The synthetic corpora (input_pipeline/synthetic.py) and the masking option it
needs (data.mask_targets: only tokens whose vocabulary entry matches are masked).

Self-contained: imports nothing from other test files."""

from __future__ import annotations

import dataclasses
import hashlib
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from input_pipeline import tokenizer as tokenizer_lib  # noqa: E402
from input_pipeline.corpus import parse_corpus_spec  # noqa: E402
from input_pipeline.device_masking import DeviceMasker  # noqa: E402
from input_pipeline.errors import CorpusError, InputPipelineError  # noqa: E402
from input_pipeline.masking import Masker, target_mask  # noqa: E402
from input_pipeline.pipeline import build_pretraining_data, from_config  # noqa: E402
from input_pipeline.synthetic import ANSWER_PATTERN, SyntheticCorpus, oracle  # noqa: E402
from input_pipeline.tokenizer import SpecialIds  # noqa: E402

# -- the masking option ------------------------------------------------------------------

SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
# ids 5..19: ordinary words "w5".."w19"; ids 20..29: targets "t20".."t29".
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         *(f"w{i}" for i in range(5, 20)), *(f"t{i}" for i in range(20, 30))]
LENGTH, SLOTS = 24, 4


def target_rows(num: int, seed: int = 0) -> np.ndarray:
    """[CLS] words with 0..4 targets among them [SEP] [PAD]..."""
    rng = np.random.default_rng(seed)
    out = np.zeros((num, LENGTH), np.int32)
    for i in range(num):
        n = int(rng.integers(1, LENGTH - 2))
        out[i, 0] = SPECIAL.cls
        out[i, 1:n + 1] = rng.integers(5, 20, n)
        k = int(rng.integers(0, min(n, SLOTS) + 1))
        out[i, 1 + rng.choice(n, k, replace=False)] = rng.integers(20, 30, k)
        out[i, n + 1] = SPECIAL.sep
    return out


def device_mask(masker: DeviceMasker, ids: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    streams = np.array([[seed, 1, 3, j] for j in range(len(ids))], np.int32)
    batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids, np.int8),
             "attention_mask": (ids != 0).astype(np.int8), "mask_stream": streams}
    return {k: np.asarray(v) for k, v in jax.jit(masker)(batch).items()}


def host_mask(masker: Masker, ids: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    return masker(ids, [np.random.default_rng([seed, j]) for j in range(len(ids))])


def test_target_mask_marks_full_matches_of_the_pattern():
    targets = target_mask(VOCAB, r"t\d+")
    assert targets.dtype == bool and targets.shape == (len(VOCAB),)
    np.testing.assert_array_equal(np.flatnonzero(targets), np.arange(20, 30))
    assert target_mask(VOCAB, r"t2\d").sum() == 10
    with pytest.raises(InputPipelineError, match="matches no token"):
        target_mask(VOCAB, "t2")  # full matches only: 't2' is a prefix of 't20'
    with pytest.raises(InputPipelineError, match="not a regular expression"):
        target_mask(VOCAB, "t(")


@pytest.mark.parametrize("where", ["host", "device"])
def test_mask_targets_masks_exactly_the_target_positions(where):
    ids = target_rows(300)
    targets = target_mask(VOCAB, r"t\d+")
    kwargs = dict(mask_prob=1.0, targets=targets, mask_token_prob=1.0, random_token_prob=0.0)
    if where == "host":
        out = host_mask(Masker(SPECIAL, len(VOCAB), SLOTS, **kwargs), ids)
    else:
        out = device_mask(DeviceMasker(SPECIAL, len(VOCAB), SLOTS, **kwargs), ids)
    for i in range(len(ids)):
        expected = np.flatnonzero(ids[i] >= 20)
        k = len(expected)
        weights = out["masked_weights"][i]
        assert weights.sum() == k and np.all(weights[:k] == 1), i
        np.testing.assert_array_equal(out["masked_positions"][i, :k], expected)
        np.testing.assert_array_equal(out["masked_ids"][i, :k], ids[i, expected])
        # every target became [MASK]; nothing else changed
        np.testing.assert_array_equal(out["input_ids"][i, expected], SPECIAL.mask)
        others = np.setdiff1d(np.arange(LENGTH), expected)
        np.testing.assert_array_equal(out["input_ids"][i, others], ids[i, others])


@pytest.mark.parametrize("where", ["host", "device"])
def test_mask_targets_with_a_rate_below_one_chooses_among_the_targets_only(where):
    ids = target_rows(200, seed=1)
    targets = target_mask(VOCAB, r"t\d+")
    if where == "host":
        out = host_mask(Masker(SPECIAL, len(VOCAB), SLOTS, mask_prob=0.5, targets=targets), ids)
    else:
        out = device_mask(DeviceMasker(SPECIAL, len(VOCAB), SLOTS, mask_prob=0.5,
                                       targets=targets), ids)
    chosen = out["masked_ids"][out["masked_weights"] > 0]
    assert len(chosen) and np.all(chosen >= 20)


def digest(out: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for key in sorted(out):
        h.update(key.encode())
        h.update(np.ascontiguousarray(out[key]).tobytes())
    return h.hexdigest()[:16]


# Digests of both maskers' output on target_rows(50, seed=2), recorded with the code
# as it was before the option existed.
BEFORE_THE_OPTION = {"host": "c3430491c87aa736", "device": "210da2718284f334"}


@pytest.mark.parametrize("where", ["host", "device"])
def test_without_targets_masking_is_bit_identical_to_before(where):
    ids = target_rows(50, seed=2)
    for kwargs in ({}, {"targets": None, "mask_token_prob": 0.8, "random_token_prob": 0.1}):
        if where == "host":
            out = host_mask(Masker(SPECIAL, len(VOCAB), SLOTS, **kwargs), ids)
        else:
            out = device_mask(DeviceMasker(SPECIAL, len(VOCAB), SLOTS, **kwargs), ids)
        assert digest(out) == BEFORE_THE_OPTION[where]


def test_targets_must_cover_the_vocabulary():
    with pytest.raises(InputPipelineError, match="targets"):
        Masker(SPECIAL, len(VOCAB), SLOTS, targets=np.ones(5, bool))


# -- the corpus --------------------------------------------------------------------------

SPECS = {"recall": "synthetic:recall:pairs=6,keys=20,values=9,queries=3,n=2300,seed=7",
         "find": "synthetic:find:pairs=6,queries=3,n=2300,seed=7",
         "mode": "synthetic:mode:pairs=12,keys=6,values=4,n=2300,seed=7"}


@pytest.mark.parametrize("task", ["recall", "find", "mode"])
def test_the_corpus_is_a_pure_function_of_its_spec(task):
    corpus = parse_corpus_spec(SPECS[task])
    again = parse_corpus_spec(SPECS[task])
    text = [s for chunk in corpus.chunks(chunk_chars=5000) for s in chunk.sentences]
    assert text == [s for chunk in again.chunks(chunk_chars=777) for s in chunk.sentences]
    assert text == [" ".join(words) for words in corpus.sequences(0, corpus.n)]
    assert len(text) == corpus.n == 2300
    # one document per sequence, numbered in order, whatever the chunking
    doc_ids = [d for chunk in corpus.chunks(chunk_chars=3000) for d in chunk.doc_ids]
    assert doc_ids == list(range(corpus.n))
    # any range (across the generator's blocks) is the same slice of the whole
    whole = corpus.draw(0, corpus.n)
    part = corpus.draw(950, 2100)
    for key in whole:
        np.testing.assert_array_equal(part[key], whole[key][950:2100])
    assert corpus.sequences(999, 1001) == corpus.sequences(0, corpus.n)[999:1001]
    other = parse_corpus_spec(SPECS[task].replace("seed=7", "seed=8"))
    assert other.sequences(0, 50) != corpus.sequences(0, 50)


@pytest.mark.parametrize("task", ["recall", "find"])
def test_every_answer_is_recoverable_by_construction(task):
    corpus = parse_corpus_spec(SPECS[task])
    d = corpus.draw(0, corpus.n)
    assert all(len(set(row)) == corpus.pairs for row in d["keys"])  # distinct keys
    assert all(len(set(row)) == corpus.pairs for row in d["values"])  # distinct values
    assert all(len(set(row)) == corpus.queries for row in d["queried"])  # distinct queries
    solved = 0
    positions = corpus.answer_positions() - 1  # without [CLS]
    for words in corpus.sequences(0, corpus.n):
        assert len(words) + 2 == corpus.sequence_length
        answers = [words[p] for p in positions]
        assert all(a.startswith("a") for a in answers)
        hidden = [("[MASK]" if i in positions else w) for i, w in enumerate(words)]
        solved += oracle(hidden) == answers
    assert solved == corpus.n  # the numpy oracle solves 100%
    # ...and the answers are not guessable from the queried key alone
    keys_to_answers = {}
    for words in corpus.sequences(0, 500):
        for k, a in zip(words[positions[0] - 1::2], words[positions[0]::2], strict=True):
            keys_to_answers.setdefault(k, set()).add(a)
    answers = corpus.values if task == "recall" else corpus.pairs
    assert max(len(a) for a in keys_to_answers.values()) == answers
    if task == "find":  # the queries are k0, k1, ... in order: a slot's place names its key
        assert all(words[positions[0] - 1::2] == [f"k{j}" for j in range(corpus.queries)]
                   for words in corpus.sequences(0, 100))


def test_a_mode_answer_is_the_members_mode_and_nothing_simpler_gives_it():
    """mode: the members' most held value, unique by 2; every value is held equally often
    in every list, so only the query's members (the relation) say which it is."""
    corpus = parse_corpus_spec("synthetic:mode:pairs=32,keys=16,values=8,n=3000,seed=3")
    assert corpus.queries == 1 and corpus.mode_count == 4
    relation = corpus.relation()
    assert relation.shape == (16, 16) and (relation.sum(axis=1) == 8).all()
    # The premise of the task: the (query type x item type) pattern an even spread over
    # the members needs is of full rank, far above a key size of 2.
    assert np.linalg.matrix_rank(relation.astype(float)) >= 15
    np.testing.assert_array_equal(relation, parse_corpus_spec(corpus.describe()).relation())
    assert not np.array_equal(relation, dataclasses.replace(corpus, seed=4).relation())
    d = corpus.draw(0, corpus.n)
    for types, values, (query,), (answer,) in zip(d["keys"], d["values"], d["queried"],
                                                  d["answer"], strict=True):
        assert (np.bincount(values, minlength=8) == 4).all()  # flat: the list says nothing
        members = relation[query][types]
        assert members.sum() == 16
        held = np.bincount(values[members], minlength=8)
        assert held[answer] == 4 and np.delete(held, answer).max() <= 2
    # an independent solver (counting with collections.Counter) agrees on every sequence
    solved = sum(oracle(words[:-1] + ["[MASK]"], relation) == [words[-1]]
                 for words in corpus.sequences(0, corpus.n))
    assert solved == corpus.n
    # ...and the answer is not a function of the query: every query type meets every answer
    pairs = {(q, a) for q, a in zip(d["queried"][:, 0], d["answer"][:, 0], strict=True)}
    assert len(pairs) == 16 * 8
    words = corpus.sequences(0, 1)[0]
    assert words[-3:-1] == ["query", f"q{d['queried'][0, 0]}"] and len(words) + 2 == 37
    with pytest.raises(InputPipelineError, match="relation"):
        oracle(words)


def test_the_spec_round_trips_and_names_every_parameter():
    corpus = parse_corpus_spec("synthetic:recall:pairs=6,queries=2")
    assert corpus.describe() == ("synthetic:recall:pairs=6,keys=64,values=16,queries=2,"
                                 "n=20000,seed=0")
    assert parse_corpus_spec(corpus.describe()) == corpus
    assert parse_corpus_spec("synthetic:recall:pairs=6:queries=2") == corpus  # ':' too
    assert parse_corpus_spec(" synthetic:recall".strip()) == SyntheticCorpus()
    assert parse_corpus_spec(corpus.describe()).identity() == corpus.identity()
    identities = {corpus.identity()}
    for change in ("pairs=7", "keys=65", "values=15", "queries=3", "n=19999",
                   "seed=1"):
        name, value = change.split("=")
        changed = dataclasses.replace(corpus, **{name: value if name == "task" else int(value)})
        identities.add(changed.identity())
    assert len(identities) == 7
    find = parse_corpus_spec("synthetic:find:pairs=5")
    assert find.describe() == "synthetic:find:pairs=5,queries=4,n=20000,seed=0"
    assert parse_corpus_spec(find.describe()) == find
    mode = parse_corpus_spec("synthetic:mode:pairs=48,values=8")
    assert mode.describe() == "synthetic:mode:pairs=48,keys=64,values=8,n=20000,seed=0"
    assert parse_corpus_spec(mode.describe()) == mode and mode.queries == 1


@pytest.mark.parametrize("spec, message", [
    ("synthetic:nope", "synthetic task 'nope' is unknown"),
    ("synthetic:", "synthetic task '' is unknown"),
    ("synthetic:recall:pairs", "'pairs' is not KEY=VALUE"),
    ("synthetic:recall:pairs=x", "pairs='x' is not an integer"),
    ("synthetic:recall:colour=1", "'colour=1' has an unknown KEY"),
    ("synthetic:recall:n=1,n=2", "n given twice"),
    ("synthetic:recall:pairs=0", "pairs=0 must be >= 1"),
    ("synthetic:recall:seed=-1", "seed=-1 must be >= 0"),
    ("synthetic:recall:pairs=20,keys=8", "keys=8 < pairs=20"),
    ("synthetic:find:pairs=2,queries=3", "queries=3 > pairs=2"),
    ("synthetic:recall:pairs=20,values=19", "values=19 < pairs=20"),
    ("synthetic:find:keys=8,values=3", "find takes no keys, values"),
    ("synthetic:mode:queries=2", "mode takes no queries"),
    ("synthetic:mode:pairs=30,values=8", "pairs=30 must be even and 3 or more times values=8"),
    ("synthetic:mode:pairs=16,values=8", "pairs=16 must be even and 3 or more times"),
    ("synthetic:mode:keys=7,pairs=32,values=8", "keys=7 must be even"),
    ("synthetic:mode:pairs=24,values=8", "cannot hold the other values at most 1 times"),
])
def test_a_bad_spec_is_one_corpus_error_line(spec, message):
    with pytest.raises(CorpusError) as error:
        parse_corpus_spec(spec)
    text = str(error.value)
    assert message in text and "\n" not in text and text.startswith("corpus: ")


# -- through the pipeline and the maskers ------------------------------------------------

MASKING = dict(mask_targets=ANSWER_PATTERN, mask_prob=1.0, mask_token_prob=1.0,
               random_token_prob=0.0)


@pytest.mark.parametrize("task", ["recall", "find", "mode"])
def test_packed_rows_are_the_sequences_and_only_the_answers_are_masked(tmp_path, task):
    spec = SPECS[task].replace("n=2300", "n=300")
    corpus = parse_corpus_spec(spec)
    length = corpus.sequence_length + 3  # some padding
    data = build_pretraining_data(spec, tmp_path, max_seq_length=length, eval_fraction=0.1,
                                  max_predictions_per_seq=corpus.queries, workers=1, **MASKING)
    assert tokenizer_lib.vocab_list(data.tokenizer) == corpus.vocabulary()
    assert data.meta["corpus"] == corpus.describe()
    assert len(data.train) + len(data.eval) == corpus.n and len(data.eval) == 30
    assert np.all(np.asarray(data.train.lengths) == corpus.sequence_length)
    vocab = np.array(corpus.vocabulary(), object)
    texts = {" ".join(words) for words in corpus.sequences(0, corpus.n)}
    rows = np.asarray(data.eval.input_ids)
    for row in rows:
        words = vocab[row[1:corpus.sequence_length - 1]].tolist()
        assert " ".join(words) in texts  # every row is one whole sequence
    answers = corpus.answer_positions()

    def check(batch, ids):
        assert batch["masked_weights"].shape[1] == corpus.queries
        for i in range(len(ids)):
            np.testing.assert_array_equal(batch["masked_positions"][i], answers)
            np.testing.assert_array_equal(batch["masked_ids"][i], ids[i, answers])
            assert np.all(batch["input_ids"][i, answers] == data.special.mask)
            keep = np.setdiff1d(np.arange(length), answers)
            np.testing.assert_array_equal(batch["input_ids"][i, keep], ids[i, keep])
            hidden = vocab[batch["input_ids"][i, 1:corpus.sequence_length - 1]].tolist()
            relation = corpus.relation() if task == "mode" else None
            assert oracle(hidden, relation) == vocab[ids[i, answers]].tolist()

    host = data.eval_batches(8, num_batches=2).batch(1)
    check(host, rows[8:16])
    device = data.eval_batches(8, num_batches=2, on_device=True).batch(1)
    check(device_mask(data.device_masker(), device["input_ids"]), rows[8:16])

    again = build_pretraining_data(spec, tmp_path, max_seq_length=length, eval_fraction=0.1,
                                   workers=1)
    assert again.packed_dir == data.packed_dir and again.tokenizer_dir == data.tokenizer_dir


def test_the_pipeline_refuses_rows_that_cannot_hold_a_sequence(tmp_path):
    spec = "synthetic:recall:pairs=6,queries=2,n=50"  # 2*6 + 2*2 + 3 = 19 tokens
    with pytest.raises(InputPipelineError, match="max_seq_length >= 19"):
        build_pretraining_data(spec, tmp_path, max_seq_length=18, eval_fraction=0.1)
    with pytest.raises(InputPipelineError, match="sentence_pairs=False"):
        build_pretraining_data(spec, tmp_path, max_seq_length=32, eval_fraction=0.1,
                               pair=True)
    with pytest.raises(InputPipelineError, match="matches no token"):
        build_pretraining_data(spec, tmp_path, max_seq_length=19, eval_fraction=0.1,
                               workers=1, mask_targets="b[0-9]+")


def test_the_pretrain_config_carries_the_masking_option(tmp_path):
    from configs import pretrain

    config = pretrain.get_config("seq_len=19")
    assert config.data.mask_targets is None  # default: BERT's masking
    assert (config.data.mask_token_prob, config.data.random_token_prob) == (0.8, 0.1)
    config.data.corpus = "synthetic:recall:pairs=6,queries=2,n=50"
    config.data.max_predictions_per_seq = 2
    config.data.update(MASKING)
    data = from_config(config.data, tmp_path)
    masker = data.masker()
    assert (masker.mask_prob, masker.mask_token_prob, masker.random_token_prob) == (1, 1, 0)
    vocab = tokenizer_lib.vocab_list(data.tokenizer)
    assert np.flatnonzero(masker.targets).tolist() == [
        i for i, token in enumerate(vocab) if token.startswith("a")]
    assert data.device_masker().targets.tolist() == masker.targets.tolist()
