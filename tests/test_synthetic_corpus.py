"""The synthetic recall corpus (input_pipeline/synthetic.py) and the masking option it
needs (data.mask_targets: only tokens whose vocabulary entry matches are masked).

Self-contained: imports nothing from other test files."""

from __future__ import annotations

import hashlib
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from input_pipeline.device_masking import DeviceMasker  # noqa: E402
from input_pipeline.errors import InputPipelineError  # noqa: E402
from input_pipeline.masking import Masker, target_mask  # noqa: E402
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
