"""glue/encode.py: examples to BERT's input ids, token types and masks, truncation as
BERT's run_classifier does it, labels."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tokenizers
from tokenizers import models, normalizers, pre_tokenizers, processors

import glue
from glue import Example

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "a",
    "dog",
    "ran",
    "play",
    "##ing",
    ".",
]
ID = {t: i for i, t in enumerate(VOCAB)}


@pytest.fixture(scope="module")
def tokenizer() -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.WordPiece(ID, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ID["[CLS]"]), ("[SEP]", ID["[SEP]"])],
    )
    return tok


def _ids(*tokens: str) -> list[int]:
    return [ID[t] for t in tokens]


def test_encode_pair_layout_and_padding(tokenizer):
    examples = [Example("0", "The cat sat.", "A dog playing", 1), Example("1", "Dog", "cat", None)]
    out = glue.encode_examples(tokenizer, examples, 12, "rte")
    assert set(out) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    assert out["input_ids"].shape == (2, 12) and out["input_ids"].dtype == np.int32
    first = _ids("[CLS]", "the", "cat", "sat", ".", "[SEP]", "a", "dog", "play", "##ing", "[SEP]")
    np.testing.assert_array_equal(out["input_ids"][0], first + [0])
    np.testing.assert_array_equal(out["token_type_ids"][0], [0] * 6 + [1] * 5 + [0])
    np.testing.assert_array_equal(out["attention_mask"][0], [1] * 11 + [0])
    np.testing.assert_array_equal(
        out["input_ids"][1], _ids("[CLS]", "dog", "[SEP]", "cat", "[SEP]") + [0] * 7
    )
    np.testing.assert_array_equal(out["token_type_ids"][1], [0, 0, 0, 1, 1] + [0] * 7)
    np.testing.assert_array_equal(out["labels"], [1, -1])
    assert tokenizer.truncation is None and tokenizer.padding is None  # caller's is untouched


@pytest.mark.parametrize(
    "len_a,len_b,budget,expected",
    [
        (2, 2, 5, (2, 2)),  # fits: untouched
        (10, 1, 5, (4, 1)),  # only the longer one is cut
        (3, 5, 5, (3, 2)),  # B longer, odd budget: BERT cuts B to below A
        (10, 12, 5, (3, 2)),  # both long: A keeps the extra token (ties pop from B)
        (12, 10, 5, (3, 2)),
        (2, 20, 6, (2, 4)),
    ],
)
def test_truncate_pair_matches_bert(len_a, len_b, budget, expected):
    assert glue.truncate_pair(len_a, len_b, budget) == expected


def test_encode_truncates_longest_first_from_the_end(tokenizer):
    # A has 3 tokens, B 5; max_length 8 leaves 5 for text: BERT keeps A[:3], B[:2].
    example = Example("0", "the cat sat", "a dog ran on the", 0)
    out = glue.encode_examples(tokenizer, [example], 8, "mrpc")
    np.testing.assert_array_equal(
        out["input_ids"][0], _ids("[CLS]", "the", "cat", "sat", "[SEP]", "a", "dog", "[SEP]")
    )
    np.testing.assert_array_equal(out["token_type_ids"][0], [0] * 5 + [1] * 3)
    np.testing.assert_array_equal(out["attention_mask"][0], [1] * 8)


def test_encode_single_sentence_and_regression_labels(tokenizer):
    examples = [Example("0", "the cat sat on the mat", None, 1), Example("1", "dog", None, 0)]
    out = glue.encode_examples(tokenizer, examples, 5, "cola")
    np.testing.assert_array_equal(
        out["input_ids"],
        [_ids("[CLS]", "the", "cat", "sat", "[SEP]"), _ids("[CLS]", "dog", "[SEP]") + [0, 0]],
    )
    assert not out["token_type_ids"].any()
    pairs = [Example("0", "a", "b", 2.5), Example("1", "a", "b", None)]
    labels = glue.encode_examples(tokenizer, pairs, 8, "stsb")["labels"]
    assert labels.dtype == np.float32 and labels[0] == 2.5 and math.isnan(labels[1])
    with pytest.raises(ValueError, match="no room"):
        glue.encode_examples(tokenizer, examples, 2, "cola")
