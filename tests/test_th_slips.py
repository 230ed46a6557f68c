"""The reader's likely talking-heads slips as switches (docs/RESULTS.md, part 9): attention
dropout before the post-softmax mixing (th_dropout_at=before_mixing), no pre-softmax
mixing (th_projections=weights, tested in test_attention.py) and the mixing drawn at the
model's initializer_range (th_init=model_std). Each is checked against numpy or the
statistics of its draw, and shown to differ from the reference where it should."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from helpers import init_params, random_batch, tiny_model_config

from attention import registry
from attention.base import dropout_weights
from attention.talking_heads import _Core, mixing_init
from common.errors import ConfigError
from configs import model as model_configs
from models import BertForMaskedLM
from models.config import ModelConfig

# B batch, T queries, S keys, N logit heads, H heads, G value heads, K key, V value size
B, T, N, K = 2, 5, 4, 3
RATE = 0.3


def _inputs(value_heads: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    q, k = (rng.normal(size=(B, T, N, K)).astype(np.float32) for _ in range(2))
    v = rng.normal(size=(B, T, value_heads, K)).astype(np.float32)
    mask = np.ones((B, T), bool)
    mask[1, 3:] = False
    p_l = rng.normal(size=(N, N)).astype(np.float32)
    p_w = rng.normal(size=(N, value_heads)).astype(np.float32)
    return q, k, v, mask, p_l, p_w


def _numpy_attention(q, k, v, mask, p_l, p_w, keep, before: bool) -> np.ndarray:
    """Talking heads in numpy, the dropout's keep-mask applied before or after P_w."""
    logits = np.einsum("BTNK,BSNK->BNTS", q, k) / np.sqrt(K)
    logits = np.einsum("BNTS,NH->BHTS", logits, p_l)
    logits = np.where(mask[:, None, None, :], logits, -1e9)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    if before:
        weights = np.where(keep, weights / (1 - RATE), 0.0)
    weights = np.einsum("BHTS,HG->BGTS", weights, p_w)
    if not before:
        weights = np.where(keep, weights / (1 - RATE), 0.0)
    return np.einsum("BGTS,BSGV->BTGV", weights, v)


@pytest.mark.parametrize(("before", "value_heads", "impl"), [
    (False, N, "full"), (True, N, "full"), (False, 2, "chunked"), (True, 2, "chunked")])
def test_dropout_before_or_after_the_weights_mixing_equals_numpy(before, value_heads, impl):
    """Both placements, with as many value heads as heads and fewer (then the two draw
    masks of different shapes), in the full path and the chunked one (Mesh TF's noise
    shape there: one mask for every query, so every chunk draws the same)."""
    from attention.talking_heads import Mixing

    q, k, v, mask, p_l, p_w = _inputs(value_heads)
    rng = jax.random.key(3)
    shared = impl == "chunked"
    # The keep-mask the layer draws: dropout_weights on ones of the dropped tensor's shape.
    dropped_heads = N if before else value_heads
    keep = np.asarray(dropout_weights(jnp.ones((B, dropped_heads, T, T)), RATE, rng,
                                      shared)) > 0
    core = _Core(mask_before=False, dropout_rate=RATE, broadcast_queries=shared,
                 dropout_before_mixing=before)
    args = (jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask),
            Mixing(jnp.asarray(p_l)), Mixing(jnp.asarray(p_w)), rng)
    out = np.asarray(core.chunked(*args, 2) if shared else core(*args))
    expected = _numpy_attention(q, k, v, mask, p_l, p_w, keep, before)
    np.testing.assert_allclose(out[0], expected[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[1, :3], expected[1, :3], rtol=1e-4, atol=1e-5)
    if value_heads == N:  # the same draw in the other place: a different function
        other = _numpy_attention(q, k, v, mask, p_l, p_w, keep, not before)
        assert np.abs(expected - other).max() > 1e-2


def test_the_memory_model_counts_the_tensors_the_backward_pass_keeps():
    """Dropout before P_w keeps its 1-byte mask at the H heads of W, not the G of U (JAX's
    saved residuals), and models/memory.py's bytes per score follow: W (H), the mask and
    the dropped copy (H), U (G) and the logits before P_l (N), against W (H), the mask
    and dropped copy of U (G) and the logits (N) after P_w."""
    from jax._src.ad_checkpoint import saved_residuals

    from attention.talking_heads import Mixing, TalkingHeadsAttention

    heads, values, element = 4, 2, 4
    for before in (False, True):
        core = _Core(False, RATE, False, dropout_before_mixing=before)

        def loss(q, k, v, p_l, p_w, core=core):
            return core(q, k, v, jnp.ones((B, T), bool), Mixing(p_l), Mixing(p_w),
                        jax.random.key(0)).sum()

        kept = saved_residuals(loss, jnp.ones((B, T, heads, K)), jnp.ones((B, T, heads, K)),
                               jnp.ones((B, T, values, K)), jnp.eye(heads),
                               jnp.ones((heads, values)))
        masks = [s.shape for s, _ in kept if s.dtype == jnp.bool_ and s.shape[-2:] == (T, T)]
        assert masks == [(B, heads if before else values, T, T)]
        cfg = tiny_model_config(
            attention="talking_heads", attention_dropout_rate=0.1, num_heads=heads,
            hidden_size=12, talking_heads={
                "num_value_heads": values,
                "dropout_placement": "before_mixing" if before else "after_mixing"})
        by_hand = (element * heads + (1 + element) * heads + element * values
                   if before else element * heads + (1 + element) * values)
        assert TalkingHeadsAttention.saved_score_bytes(cfg, element) == by_hand + element * heads


def test_dropout_placement_is_a_model_setting_that_changes_training_only():
    base = tiny_model_config(attention="talking_heads", attention_dropout_rate=0.2)
    slip = tiny_model_config(attention="talking_heads", attention_dropout_rate=0.2,
                             talking_heads={"dropout_placement": "before_mixing"})
    model, slipped = BertForMaskedLM(base), BertForMaskedLM(slip)
    ids, types, mask = random_batch(jax.random.key(0), pad_from=9)
    params = init_params(model, ids, types, mask)
    params = jax.tree_util.tree_map_with_path(  # mixings far from the identity
        lambda path, p: p * 3.0 if "mixing" in jax.tree_util.keystr(path) else p, params)

    def hidden(m, deterministic):
        return m.apply({"params": params}, ids, types, mask, deterministic=deterministic,
                       rngs={"dropout": jax.random.key(1)})["hidden_states"]

    np.testing.assert_array_equal(hidden(model, True), hidden(slipped, True))
    assert float(jnp.abs(hidden(model, False) - hidden(slipped, False)).max()) > 1e-3
    assert registry.get(slip.attention).label(slip) == "talking_heads (dropout before mixing)"


def test_model_std_mixing_is_drawn_at_the_models_initializer_range_at_any_head_count():
    for heads in (8, 96):
        drawn = np.asarray(nn.unbox(mixing_init("model_std", model_std=0.02)(
            jax.random.key(heads), (heads, 40_000))))
        assert drawn.std() == pytest.approx(0.02, rel=0.01)
        assert abs(drawn.mean()) < 1e-3
    # Through the model: every mixing matrix at its initializer_range, not 1/sqrt(heads).
    cfg = tiny_model_config(attention="talking_heads", num_heads=16, hidden_size=64,
                            initializer_range=0.05, talking_heads={"init": "model_std"})
    ids, types, mask = random_batch(jax.random.key(0))
    params = init_params(BertForMaskedLM(cfg), ids, types, mask)
    mixings = [np.asarray(p) for path, p in jax.tree_util.tree_leaves_with_path(params)
               if "mixing" in jax.tree_util.keystr(path)]
    assert len(mixings) == 4  # P_l and P_w in each of 2 layers
    assert np.concatenate([m.ravel() for m in mixings]).std() == pytest.approx(0.05, rel=0.1)
    assert registry.get(cfg.attention).label(cfg) == "talking_heads (model_std mixing)"


def test_the_switches_are_short_args_and_a_bad_value_is_one_line():
    config = model_configs.get_config(
        "size=mini,attention=talking_heads,th_dropout_at=before_mixing,th_init=model_std")
    model = ModelConfig.from_config(config.model)
    assert model.talking_heads.dropout_placement == "before_mixing"
    assert model.talking_heads.init == "model_std"
    bad = model_configs.get_config("size=mini,attention=talking_heads,th_dropout_at=nowhere")
    with pytest.raises(ConfigError, match=r"dropout_placement='nowhere' is unknown"):
        ModelConfig.from_config(bad.model).validate()
    nothing_to_drop_before = model_configs.get_config(
        "size=mini,attention=talking_heads,th_dropout_at=before_mixing,th_projections=logits")
    with pytest.raises(ConfigError, match=r"'before_mixing' needs the weights mixing P_w"):
        ModelConfig.from_config(nothing_to_drop_before.model).validate()


class FixedDrop(torch.nn.Module):
    """Dropout with one given (rescaled) keep-mask."""

    def __init__(self, keep: torch.Tensor):
        super().__init__()
        self.keep = keep

    def forward(self, weights: torch.Tensor) -> torch.Tensor:
        return weights * self.keep


def test_the_pytorch_module_drops_where_the_jax_model_does():
    """The exported module's train mode honours the placement: with one fixed keep-mask
    as its dropout, P_w = I makes the two placements one function; a real P_w does not."""
    from models.modeling_bert_ablation import BertAblationConfig, SelfAttention

    keep = (torch.rand(2, 4, 5, 5, generator=torch.Generator().manual_seed(1)) > 0.5) * 2.0

    def run(placement: str, mixing: torch.Tensor) -> torch.Tensor:
        config = BertAblationConfig(
            vocab_size=97, hidden_size=16, num_hidden_layers=1, num_attention_heads=4,
            intermediate_size=32, attention_probs_dropout_prob=0.5,
            attention="talking_heads", talking_heads={"dropout_placement": placement})
        torch.manual_seed(0)
        module = SelfAttention(config).train()
        module.dropout = FixedDrop(keep)
        with torch.no_grad():
            module.weights_mixing.copy_(mixing)
            return module(torch.ones(2, 5, 16).cumsum(-1).sin(), torch.ones(2, 5, dtype=bool))

    eye = torch.eye(4)
    torch.testing.assert_close(run("after_mixing", eye), run("before_mixing", eye))
    mixed = torch.randn(4, 4, generator=torch.Generator().manual_seed(2))
    assert (run("after_mixing", mixed) - run("before_mixing", mixed)).abs().max() > 1e-3
