"""BERT's masked-LM corruption, in numpy on the host.

Per sequence: k = min(P, max(1, round(mask_prob * n))) of the n maskable tokens
(everything but [PAD], [CLS], [SEP], [MASK]) are chosen uniformly without
replacement; each chosen token becomes [MASK] with probability 0.8, a random
non-special token with 0.1, and stays itself with 0.1. BERT's
create_pretraining_data counts [CLS]/[SEP] in n; here n counts only maskable
tokens, so the 15% is of the text. Outputs have a static shape: P prediction slots
per sequence, unused slots with position 0, id 0 and weight 0.

Whole-word masking (BERT's 2019 variant): a word is a maskable token plus the
'##' continuation pieces right after it. Words are taken in random order and
skipped when they would overshoot k, so all pieces of a word are masked together
and at most k tokens are predicted.

Targets (`targets`, data.mask_targets): only tokens marked in a bool [vocab] array
may be chosen (n counts those), for tasks whose loss belongs on known answers only
(input_pipeline/synthetic.py); `target_mask` marks the vocabulary entries that match
a regular expression. None (the default) is BERT's masking above, draw for draw.

One numpy Generator may serve a whole batch, or one Generator per row; the
latter makes a row's mask independent of which process or batch computes it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence

import numpy as np

from input_pipeline.errors import InputPipelineError
from input_pipeline.tokenizer import SpecialIds


@dataclasses.dataclass(frozen=True, eq=False)
class MaskingRecipe:
    """BERT's masking settings, checked once; the numpy Masker below and the device
    masker (input_pipeline/device_masking.py) apply the same recipe."""

    special: SpecialIds
    vocab_size: int
    max_predictions: int  # P: prediction slots per sequence (static shape)
    mask_prob: float = 0.15
    whole_word: bool = False
    continuation: np.ndarray | None = None  # bool [vocab]: '##' pieces; needed for whole_word
    mask_token_prob: float = 0.8  # of the chosen: -> [MASK]
    random_token_prob: float = 0.1  # of the chosen: -> a random non-special token
    targets: np.ndarray | None = None  # bool [vocab]: the only tokens that may be chosen

    def __post_init__(self) -> None:
        if self.max_predictions < 1:
            raise InputPipelineError(f"masking: max_predictions={self.max_predictions} < 1")
        if not 0.0 < self.mask_prob <= 1.0:
            raise InputPipelineError(f"masking: mask_prob={self.mask_prob} not in (0, 1]")
        if self.whole_word and self.continuation is None:
            raise InputPipelineError("masking: whole_word=True needs the continuation mask")
        if self.mask_token_prob + self.random_token_prob > 1.0:
            raise InputPipelineError("masking: mask_token_prob + random_token_prob > 1")
        if self.targets is not None and np.shape(self.targets) != (self.vocab_size,):
            raise InputPipelineError(f"masking: targets has shape {np.shape(self.targets)}, "
                                     f"expected ({self.vocab_size},), one per vocabulary entry")

    def maskable(self, input_ids: np.ndarray) -> np.ndarray:
        """bool, shape of input_ids: the tokens masking may choose."""
        maskable = ~np.isin(input_ids, self.special.never_masked)
        if self.targets is not None:
            maskable &= np.asarray(self.targets, bool)[input_ids]
        return maskable

    @functools.cached_property
    def random_pool(self) -> np.ndarray:
        """Ids a 'random token' replacement may draw: the vocabulary minus specials."""
        return np.setdiff1d(np.arange(self.vocab_size), self.special.all).astype(np.int32)

    def num_to_mask(self, num_maskable: int) -> int:
        if num_maskable == 0:
            return 0
        # floor(x + 0.5): round half up, as Python 2's round in BERT's script did.
        k = int(np.floor(self.mask_prob * num_maskable + 0.5))
        return min(self.max_predictions, max(1, k), num_maskable)


@dataclasses.dataclass(frozen=True, eq=False)
class Masker(MaskingRecipe):
    """Masks batches of packed input_ids on the host; see the module docstring."""

    def __call__(
        self, input_ids: np.ndarray, rng: np.random.Generator | Sequence[np.random.Generator],
    ) -> dict[str, np.ndarray]:
        """input_ids int [B, T] -> dict with
        input_ids        int32 [B, T]  corrupted copy
        masked_positions int32 [B, P]  sorted positions of the predictions
        masked_ids       int32 [B, P]  original tokens there
        masked_weights   float32 [B, P] 1 for a prediction, 0 for an unused slot
        """
        input_ids = np.asarray(input_ids)
        b, _ = input_ids.shape
        rngs = [rng] * b if isinstance(rng, np.random.Generator) else list(rng)
        if len(rngs) != b:
            raise InputPipelineError(f"masking: {len(rngs)} generators for {b} rows")
        p = self.max_predictions
        out = input_ids.astype(np.int32, copy=True)
        positions = np.zeros((b, p), np.int32)
        ids = np.zeros((b, p), np.int32)
        weights = np.zeros((b, p), np.float32)
        maskable = self.maskable(input_ids)
        pool = self.random_pool
        for i in range(b):
            chosen = self._choose(input_ids[i], np.flatnonzero(maskable[i]), rngs[i])
            k = len(chosen)
            positions[i, :k] = chosen
            ids[i, :k] = input_ids[i, chosen]
            weights[i, :k] = 1.0
            u = rngs[i].random(k)
            to_mask = u < self.mask_token_prob
            to_random = ~to_mask & (u < self.mask_token_prob + self.random_token_prob)
            out[i, chosen[to_mask]] = self.special.mask
            out[i, chosen[to_random]] = rngs[i].choice(pool, size=int(to_random.sum()))
        return {"input_ids": out, "masked_positions": positions, "masked_ids": ids,
                "masked_weights": weights}

    def _choose(self, row: np.ndarray, cand: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Sorted positions to predict in one row, from the maskable positions `cand`."""
        k = self.num_to_mask(len(cand))
        if k == 0:
            return cand[:0]
        if not self.whole_word:
            return np.sort(rng.choice(cand, size=k, replace=False))
        # A word starts at a maskable token that is not a '##' piece directly after
        # another maskable token.
        gap = np.diff(cand, prepend=-2) != 1
        starts = np.flatnonzero(gap | ~self.continuation[row[cand]])
        words = np.split(cand, starts[1:])
        chosen: list[np.ndarray] = []
        total = 0
        for w in rng.permutation(len(words)):
            if total + len(words[w]) > k:
                continue  # BERT skips a word that would overshoot and tries the next
            chosen.append(words[w])
            total += len(words[w])
            if total == k:
                break
        return np.sort(np.concatenate(chosen)) if chosen else cand[:0]


def target_mask(vocab: Sequence[str], pattern: str) -> np.ndarray:
    """bool [vocab]: the entries (tokens in id order, e.g. tokenizer.vocab_list) that
    match `pattern` in full; InputPipelineError if it is no regex or matches none."""
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise InputPipelineError(f"masking: mask_targets={pattern!r} is not a regular "
                                 f"expression: {e}") from None
    marked = np.array([regex.fullmatch(token) is not None for token in vocab], bool)
    if not marked.any():
        raise InputPipelineError(f"masking: mask_targets={pattern!r} matches no token of "
                                 f"the vocabulary ({len(vocab)} entries)")
    return marked
