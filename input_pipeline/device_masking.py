"""BERT's masked-LM corruption inside the jitted train step (JAX), so the host only
gathers rows of token ids and never masks.

The recipe is input_pipeline/masking.py's (the numpy `Masker`, kept as the reference
and for `data.masking=host`): per sequence k = min(P, max(1, round(mask_prob * n)), n)
of the n maskable tokens (not [PAD], [CLS], [SEP], [MASK]) are chosen uniformly
without replacement; each becomes [MASK] with probability 0.8, a random non-special
token with 0.1, and stays itself with 0.1. Whole-word masking takes words ('##'
pieces join the token before them) in random order, skipping a word that would
overshoot k, as BERT's create_pretraining_data. Outputs have P static slots; unused
slots hold position 0, id 0, weight 0. The random draws differ from numpy's (another
generator); the distribution is the same (tests/test_device_masking.py). With
`targets` only the marked tokens may be chosen, as in the numpy Masker.

Randomness: row r of a batch carries `mask_stream` int32 [4] = (seed, stream, a, b),
and its key is key(seed) folded with stream, a and b. Training rows use
(seed, TRAIN, step, global row), eval rows (0, EVAL, example, 0): a row's mask is a
pure function of those numbers, whichever process or device computes it, so exact
resume and per-process shards keep working.

Einsum and shape letters: the one legend in attention/__init__.py.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from input_pipeline import tokenizer as tokenizer_lib
from input_pipeline.masking import MaskingRecipe, target_mask
from input_pipeline.tokenizer import SpecialIds


@dataclasses.dataclass(frozen=True, eq=False)
class DeviceMasker(MaskingRecipe):
    """Masks a batch on the device: `masker(batch)` -> batch with MLM fields."""

    @classmethod
    def for_tokenizer(cls, tokenizer, max_predictions: int, mask_prob: float = 0.15,
                      whole_word: bool = False, *, mask_targets: str | None = None,
                      mask_token_prob: float = 0.8,
                      random_token_prob: float = 0.1) -> DeviceMasker:
        """The masker for a `tokenizers.Tokenizer` (its special ids and '##' pieces);
        mask_targets: a regex over its vocabulary (masking.target_mask), None: any token."""
        continuation = tokenizer_lib.continuation_mask(tokenizer) if whole_word else None
        targets = None if mask_targets is None else target_mask(
            tokenizer_lib.vocab_list(tokenizer), mask_targets)
        return cls(SpecialIds.from_tokenizer(tokenizer),
                   tokenizer_lib.vocab_bound(tokenizer), max_predictions,
                   mask_prob, whole_word=whole_word, continuation=continuation,
                   mask_token_prob=mask_token_prob, random_token_prob=random_token_prob,
                   targets=targets)

    def __call__(self, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """batch with input_ids [B, T] (unmasked) and mask_stream [B, 4] -> the same batch
        with input_ids corrupted and masked_positions / masked_ids / masked_weights [B, P]
        added (mask_stream dropped)."""
        batch = dict(batch)
        keys = jax.vmap(row_key)(batch.pop("mask_stream"))
        out = jax.vmap(self.mask_row)(keys, batch["input_ids"].astype(jnp.int32))
        if "row_weights" in batch:  # eval filler rows: nothing to score
            out["masked_weights"] = out["masked_weights"] * batch.pop("row_weights")[:, None]
        for name in ("token_type_ids", "attention_mask"):
            batch[name] = batch[name].astype(jnp.int32)
        return {**batch, **out}

    def mask_row(self, key: jax.Array, ids: jax.Array) -> dict[str, jax.Array]:
        length, slots = ids.shape[0], self.max_predictions
        choose_key, action_key, random_key = jax.random.split(key, 3)
        maskable = ~jnp.isin(ids, jnp.asarray(self.special.never_masked))
        if self.targets is not None:
            maskable &= jnp.asarray(self.targets)[ids]
        n = jnp.sum(maskable)
        # floor(x + 0.5): round half up, as Python 2's round in BERT's script.
        k = jnp.floor(self.mask_prob * n + 0.5).astype(jnp.int32)
        k = jnp.minimum(jnp.minimum(jnp.maximum(k, 1), slots), n)
        if self.whole_word:
            chosen = self._choose_words(choose_key, ids, maskable, k)
        else:
            # The k maskable positions with the highest uniform scores: a uniform
            # sample without replacement.
            scores = jnp.where(maskable, jax.random.uniform(choose_key, (length,)), -1.0)
            _, best = jax.lax.top_k(scores, slots)
            chosen = jnp.zeros(length, bool).at[best].set(jnp.arange(slots) < k)
        # Sorted positions of the chosen tokens in the P slots; unused slots -> 0.
        (positions,) = jnp.nonzero(chosen, size=slots, fill_value=0)
        used = jnp.arange(slots) < jnp.sum(chosen)
        originals = ids[positions]
        u = jax.random.uniform(action_key, (slots,))
        to_mask = u < self.mask_token_prob
        to_random = ~to_mask & (u < self.mask_token_prob + self.random_token_prob)
        pool = jnp.asarray(self.random_pool)
        random_ids = pool[jax.random.randint(random_key, (slots,), 0, pool.shape[0])]
        new = jnp.where(to_mask, self.special.mask, jnp.where(to_random, random_ids, originals))
        # Unused slots point at position 0 and write back its own token: a no-op.
        corrupted = ids.at[positions].set(jnp.where(used, new, originals))
        return {"input_ids": corrupted,
                "masked_positions": jnp.where(used, positions, 0).astype(jnp.int32),
                "masked_ids": jnp.where(used, originals, 0).astype(jnp.int32),
                "masked_weights": used.astype(jnp.float32)}

    def _choose_words(self, key: jax.Array, ids: jax.Array, maskable: jax.Array,
                      k: jax.Array) -> jax.Array:
        """bool [L]: whole words in random order, skipping one that would overshoot k."""
        length = ids.shape[0]
        continuation = jnp.asarray(self.continuation)[ids]
        after_maskable = jnp.concatenate([jnp.zeros(1, bool), maskable[:-1]])
        starts = maskable & (~continuation | ~after_maskable)
        word = jnp.where(maskable, jnp.cumsum(starts) - 1, length)  # word index, or L
        sizes = jax.ops.segment_sum(maskable.astype(jnp.int32), word,
                                    num_segments=length + 1)[:length]
        order = jnp.argsort(jnp.where(sizes > 0, jax.random.uniform(key, (length,)), 2.0))

        def take(total, w):
            fits = (sizes[w] > 0) & (total + sizes[w] <= k)
            return total + jnp.where(fits, sizes[w], 0), fits

        _, taken_in_order = jax.lax.scan(take, jnp.zeros((), jnp.int32), order)
        taken = jnp.zeros(length + 1, bool).at[order].set(taken_in_order)
        return maskable & taken[word]


def row_key(stream: jax.Array) -> jax.Array:
    """key(seed) folded with the stream, a and b of one row's mask_stream [4]. Always
    threefry (not jax's default PRNG, nor config.dropout_prng): these draws are the data,
    the same on every backend and under vmap (rbg keys would draw from the first row's)."""
    key = jax.random.key(stream[0].astype(jnp.uint32), impl="threefry2x32")
    for value in (stream[1], stream[2], stream[3]):
        key = jax.random.fold_in(key, value.astype(jnp.uint32))
    return key
