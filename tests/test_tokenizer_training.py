"""train_tokenizer is reproducible: the same sentences give the same vocabulary, ids
included, in every process (tokenizers' own trainer orders it by a randomly seeded hash
map, huggingface/tokenizers#1794), and the seeding it needs leaves BERT's tokenizer as
it was: five special tokens, the alphabet limited to the most frequent characters."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from helpers import REPO

from input_pipeline.tokenizer import (
    SPECIAL_TOKENS,
    load_tokenizer,
    train_tokenizer,
    vocab_list,
)


def tied_sentences(seed: int = 0) -> list[str]:
    """Words of random letters, many of them equally frequent: the ties that the
    library's trainer breaks by hash order."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, rng.integers(2, 7))) for _ in range(300)]
    return [" ".join(rng.choice(words, 12)) + "." for _ in range(400)]


def test_the_same_sentences_train_the_same_vocabulary_in_every_process(tmp_path):
    sentences = tied_sentences()
    here = [vocab_list(train_tokenizer(sentences, 400)) for _ in range(3)]
    (tmp_path / "sentences.json").write_text(json.dumps(sentences))
    other = subprocess.run(
        [sys.executable, "-c", "import json, sys\n"
         "from input_pipeline.tokenizer import train_tokenizer, vocab_list\n"
         "s = json.load(open(sys.argv[1]))\n"
         "print(json.dumps(vocab_list(train_tokenizer(s, 400))))",
         str(tmp_path / "sentences.json")],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert len(here[0]) == 400
    for vocabulary in [*here[1:], json.loads(other.stdout)]:
        assert vocabulary == here[0]


def test_a_function_or_a_list_is_read_twice_and_an_iterator_is_refused():
    sentences = tied_sentences()
    chunks = [sentences[i:i + 50] for i in range(0, len(sentences), 50)]
    from_function = train_tokenizer(lambda: iter(chunks), 400)
    assert vocab_list(from_function) == vocab_list(train_tokenizer(sentences, 400))
    with pytest.raises(TypeError, match="reads its sentences twice"):
        train_tokenizer(iter(sentences), 400)
    once = iter(chunks)
    with pytest.raises(TypeError, match="must return a fresh iterable"):
        train_tokenizer(lambda: once, 400)  # the second pass would see nothing


def test_the_alphabet_is_the_most_frequent_characters_with_ties_by_code_point():
    # Counts (independent of the trainer): a 160, b 120, c, d and e 40 each (a tie at
    # the cut), f 20.
    sentences = ["ab " * 10 + "abcd " * 10 + "ab " * 10 + "ae " * 10 + "f " * 5] * 4
    counts = Counter(c for s in sentences for c in s if c != " ")
    assert counts["c"] == counts["d"] == counts["e"] == 40
    kept = sorted(counts, key=lambda c: (-counts[c], c))[:3]
    assert kept == ["a", "b", "c"]
    for _ in range(3):  # every time: the tie at the cut goes to the lower code point
        vocabulary = vocab_list(train_tokenizer(sentences, 30, limit_alphabet=3,
                                                min_frequency=1))
        characters = {t for t in vocabulary if len(t) == 1}
        assert characters == set(kept)
        continuations = {t[2:] for t in vocabulary if t.startswith("##") and len(t) == 3}
        assert continuations <= set(kept)


def test_only_berts_five_tokens_are_special_and_the_vocabulary_reads_back_alike(tmp_path):
    """The continuation characters that seed the trainer end as ordinary tokens: the
    tokenizer encodes "##e" written in a text as the vocab.txt it saved does (Google's
    format, loaded without any added tokens)."""
    tokenizer = train_tokenizer(tied_sentences(), 400, tmp_path / "tok")
    added = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    assert added == set(SPECIAL_TOKENS)
    from_vocab_txt = load_tokenizer(tmp_path / "tok" / "vocab.txt")
    for text in ["abc ##e def.", "x##q ## #", *tied_sentences(seed=1)[:20]]:
        assert tokenizer.encode(text).ids == from_vocab_txt.encode(text).ids, text
    assert "##e" not in tokenizer.encode("a ##e").tokens  # '#', '#', 'e' as in BERT


@pytest.mark.slow
def test_two_fresh_runs_of_one_config_train_the_same_model(tmp_path):
    """Each run trains its own vocabulary (its own data cache) and ends on the same
    parameters: what rerunning a command on another day or machine relies on."""
    import jax
    from helpers import final_params, tiny_run_config, write_run_corpus

    from training.pretrain import train_and_evaluate

    corpus = write_run_corpus(str(tmp_path))
    for run in ("a", "b"):
        train_and_evaluate(tiny_run_config(corpus, str(tmp_path / f"cache_{run}"), steps=4),
                           str(tmp_path / run))
    vocabularies = [(tmp_path / run / "tokenizer" / "vocab.txt").read_text()
                    for run in ("a", "b")]
    assert vocabularies[0] == vocabularies[1]
    (step_a, params_a), (step_b, params_b) = (final_params(str(tmp_path / run))
                                              for run in ("a", "b"))
    assert step_a == step_b == 4
    jax.tree.map(np.testing.assert_array_equal, params_a, params_b)
