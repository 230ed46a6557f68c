"""Masking inside the jitted step against the numpy Masker's recipe: counts, which
tokens, the 80/10/10 split, uniform choice, whole words, and per-row determinism."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from scipy import stats

from input_pipeline.device_masking import DeviceMasker
from input_pipeline.masking import Masker
from input_pipeline.tokenizer import SpecialIds

pytestmark = pytest.mark.slow  # every test compiles the masker (seconds each)

SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
VOCAB, LENGTH, SLOTS = 50, 32, 6


def rows(num: int, seed: int = 0) -> np.ndarray:
    """[CLS] text [SEP] [PAD]..., text lengths 0..29, some [UNK] and continuation ids."""
    rng = np.random.default_rng(seed)
    out = np.zeros((num, LENGTH), np.int32)
    for i in range(num):
        n = int(rng.integers(0, LENGTH - 2))
        out[i, 0] = SPECIAL.cls
        out[i, 1:n + 1] = rng.integers(5, VOCAB, n)
        out[i, 1:n + 1][rng.random(n) < 0.05] = SPECIAL.unk
        out[i, n + 1] = SPECIAL.sep
    return out


CONTINUATION = np.zeros(VOCAB, bool)
CONTINUATION[30:] = True  # ids 30.. are '##' pieces


@functools.cache
def jitted_masker(whole_word: bool):
    return jax.jit(DeviceMasker(SPECIAL, VOCAB, SLOTS, whole_word=whole_word,
                                continuation=CONTINUATION if whole_word else None))


def device_mask(ids: np.ndarray, whole_word: bool = False, seed: int = 0, first_row: int = 0):
    streams = np.array([[seed, 1, 7, first_row + j] for j in range(len(ids))], np.int32)
    batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids, np.int8),
             "attention_mask": (ids != 0).astype(np.int8), "mask_stream": streams}
    return {k: np.asarray(v) for k, v in jitted_masker(whole_word)(batch).items()}


def test_counts_positions_and_unchanged_tokens_follow_the_recipe():
    ids = rows(400)
    out = device_mask(ids)
    reference = Masker(SPECIAL, VOCAB, SLOTS)
    for i in range(len(ids)):
        maskable = ~np.isin(ids[i], SPECIAL.never_masked)
        k = reference.num_to_mask(int(maskable.sum()))
        weights = out["masked_weights"][i]
        assert weights.sum() == k and np.all(weights[:k] == 1)
        positions = out["masked_positions"][i, :k]
        assert np.all(np.diff(positions) > 0) and np.all(maskable[positions])
        np.testing.assert_array_equal(out["masked_ids"][i, :k], ids[i, positions])
        assert np.all(out["masked_positions"][i, k:] == 0) and np.all(out["masked_ids"][i, k:] == 0)
        untouched = np.ones(LENGTH, bool)
        untouched[positions] = False
        np.testing.assert_array_equal(out["input_ids"][i, untouched], ids[i, untouched])


def test_replacements_are_80_10_10_and_random_ids_are_never_special():
    ids = rows(6000, seed=1)
    out = device_mask(ids, seed=3)
    used = out["masked_weights"] > 0
    rows_idx = np.nonzero(used)[0]
    new = out["input_ids"][rows_idx, out["masked_positions"][used]]
    old = out["masked_ids"][used]
    masked = new == SPECIAL.mask
    kept = new == old
    randomised = ~masked & ~kept
    # A random draw can hit the original token (1/45 of the 10%): kept is 0.1 + 0.1/45.
    assert used.sum() > 10_000
    assert abs(masked.mean() - 0.8) < 0.015
    assert abs(kept.mean() - (0.1 + 0.1 / 45)) < 0.01
    assert not np.isin(new[randomised], SPECIAL.all).any()


def test_every_maskable_position_is_equally_likely():
    ids = np.tile(rows(1, seed=2), (4000, 1))
    ids[:, 1:LENGTH - 1] = 10  # 30 maskable tokens in every row
    ids[:, LENGTH - 1] = SPECIAL.sep
    out = device_mask(ids, seed=5)
    counts = np.bincount(out["masked_positions"][out["masked_weights"] > 0], minlength=LENGTH)
    assert counts[0] == counts[LENGTH - 1] == 0
    assert stats.chisquare(counts[1:LENGTH - 1]).pvalue > 1e-3


def test_whole_words_are_masked_together_and_never_overshoot():
    ids = rows(600, seed=4)
    out = device_mask(ids, whole_word=True, seed=6)
    reference = Masker(SPECIAL, VOCAB, SLOTS, whole_word=True, continuation=CONTINUATION)
    device_counts, host_counts = [], []
    for i in range(len(ids)):
        maskable = ~np.isin(ids[i], SPECIAL.never_masked)
        k = reference.num_to_mask(int(maskable.sum()))
        chosen = np.zeros(LENGTH, bool)
        chosen[out["masked_positions"][i][out["masked_weights"][i] > 0]] = True
        assert chosen.sum() <= k
        # A word: a maskable token plus the '##' pieces right after it.
        for j in range(1, LENGTH):
            if maskable[j] and maskable[j - 1] and CONTINUATION[ids[i, j]]:
                assert chosen[j] == chosen[j - 1]
        device_counts.append(chosen.sum())
        host = reference(ids[i:i + 1], np.random.default_rng(i))
        host_counts.append(host["masked_weights"].sum())
    # Same recipe, other random numbers: the same number of predictions on average.
    assert abs(np.mean(device_counts) - np.mean(host_counts)) < 0.1


@pytest.mark.parametrize("whole_word", [False, True])
def test_a_rows_mask_depends_only_on_its_stream(whole_word):
    ids = rows(8, seed=7)
    together = device_mask(ids, whole_word)
    for j in range(len(ids)):  # one row at a time, as another process would compute it
        alone = device_mask(ids[j:j + 1], whole_word, first_row=j)
        for name, value in alone.items():
            np.testing.assert_array_equal(value[0], together[name][j])
    other_seed = device_mask(ids, whole_word, seed=1)
    assert not np.array_equal(other_seed["masked_positions"], together["masked_positions"])
