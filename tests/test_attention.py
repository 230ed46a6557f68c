"""Attention variants (attention/): building, gradients, equivalences between paths,
dropout placement, padding, the registry. The model around them: test_bert.py."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    ATTENTION_VARIANTS,
    init_params,
    random_batch,
    shipped_variants,
    tiny_model_config,
)

import attention
from models import BertForMaskedLM


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("variant", sorted(ATTENTION_VARIANTS))
def test_variant_builds_runs_and_has_finite_gradients(variant, norm, rng):
    overrides = dict(ATTENTION_VARIANTS[variant])
    fused = overrides.get("attention_impl") == "fused"
    cfg = tiny_model_config(norm_placement=norm, dropout_rate=0.1,
                      attention_dropout_rate=0.0 if fused else 0.1, **overrides)
    model = BertForMaskedLM(cfg)
    ids, types, mask = random_batch(rng, pad_from=9)
    params = init_params(model, ids, types, mask)

    def loss(p):
        out = model.apply({"params": p}, ids, types, mask, deterministic=False,
                          rngs={"dropout": jax.random.key(1)})
        return jnp.mean(jax.nn.logsumexp(out["mlm_logits"], -1)), out

    (value, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    assert out["hidden_states"].shape == (3, 12, cfg.hidden_size)
    assert out["mlm_logits"].shape == (3, 12, cfg.vocab_size)
    assert np.isfinite(float(value))
    named = {jax.tree_util.keystr(p): g for p, g in jax.tree_util.tree_leaves_with_path(grads)}
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in named.values())
    # Every parameter gets a gradient (a dead branch would give exact zeros), except
    # the pooler (unused by the MLM loss) and the key bias (softmax is shift-invariant).
    exempt = ("pooler", "['key']['bias']")
    dead = [name for name, g in named.items()
            if float(jnp.abs(g).max()) == 0 and not any(e in name for e in exempt)]
    assert dead == []


def attention_module(cfg):
    return attention.get(cfg.attention)(cfg)


def run_attention(cfg, params, x, mask):
    return attention_module(cfg).apply({"params": params}, x, mask, True)


@pytest.mark.slow
def test_talking_heads_with_identity_projections_equals_multi_head(rng):
    mh_cfg = tiny_model_config(key_size=12, value_size=6)
    th_cfg = tiny_model_config(key_size=12, value_size=6, attention="talking_heads",
                         talking_heads={"init": "identity"})
    x = jax.random.normal(rng, (2, 10, 32))
    mask = jnp.ones((2, 10), bool).at[1, 7:].set(False)
    mh_params = init_params(attention_module(mh_cfg), x, mask, True)
    th_params = init_params(attention_module(th_cfg), x, mask, True, seed=5)
    np.testing.assert_array_equal(th_params["logits_mixing"], np.eye(4))
    th_params = {**th_params, **mh_params}  # same q/k/v/o weights, identity mixing
    np.testing.assert_allclose(
        run_attention(th_cfg, th_params, x, mask), run_attention(mh_cfg, mh_params, x, mask),
        atol=1e-5, rtol=1e-5,
    )


@pytest.mark.slow
def test_explicit_head_sizes_equal_default(rng):
    default, explicit = tiny_model_config(), tiny_model_config(key_size=8, value_size=8)
    ids, types, mask = random_batch(rng, pad_from=8)
    params = init_params(BertForMaskedLM(default), ids, types, mask)
    a = BertForMaskedLM(default).apply({"params": params}, ids, types, mask)
    b = BertForMaskedLM(explicit).apply({"params": params}, ids, types, mask)
    np.testing.assert_array_equal(a["mlm_logits"], b["mlm_logits"])


@pytest.mark.slow
@pytest.mark.parametrize("key_size,value_size", [(8, 8), (12, 8), (8, 20)])
def test_fused_path_equals_einsum_path(key_size, value_size, rng):
    einsum = tiny_model_config(key_size=key_size, value_size=value_size, attention_impl="einsum")
    fused = einsum.replace(attention_impl="fused")
    x = jax.random.normal(rng, (2, 9, 32))
    mask = jnp.ones((2, 9), bool).at[0, 5:].set(False)
    params = init_params(attention_module(einsum), x, mask, True)

    def loss(cfg, p):
        return jnp.sum(jnp.sin(run_attention(cfg, p, x, mask)))

    np.testing.assert_allclose(run_attention(fused, params, x, mask),
                               run_attention(einsum, params, x, mask), atol=1e-5)
    g_fused = jax.grad(lambda p: loss(fused, p))(params)
    g_einsum = jax.grad(lambda p: loss(einsum, p))(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), g_fused, g_einsum)


@pytest.mark.slow
@pytest.mark.parametrize("length,chunk", [(16, 4), (13, 5)])
def test_chunked_talking_heads_equals_full_values_and_gradients(length, chunk, rng):
    full = tiny_model_config(attention="talking_heads", key_size=12, value_size=8,
                       talking_heads={"num_logit_heads": 6, "num_value_heads": 3})
    chunked = full.replace(talking_heads=full.talking_heads.__class__(
        num_logit_heads=6, num_value_heads=3, impl="chunked", query_chunk_size=chunk))
    x = jax.random.normal(rng, (2, length, 32))
    mask = jnp.ones((2, length), bool).at[1, length - 4:].set(False)
    params = init_params(attention_module(full), x, mask, True)

    def loss(cfg, p, x):
        return jnp.sum(jnp.cos(run_attention(cfg, p, x, mask)))

    np.testing.assert_allclose(run_attention(chunked, params, x, mask),
                               run_attention(full, params, x, mask), atol=1e-5)
    g_chunked = jax.grad(loss, argnums=(1, 2))(chunked, params, x)
    g_full = jax.grad(loss, argnums=(1, 2))(full, params, x)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), g_chunked, g_full)


def numpy_talking_heads_weights(q, k, p_logits, p_weights):
    """U = softmax(Q.K / sqrt(K) @ P_l) @ P_w as (B, T, G, S), in numpy (no mask, no dropout)."""
    logits = np.einsum("btnk,bsnk->bnts", q, k) / np.sqrt(q.shape[-1])
    logits = np.einsum("bnts,nh->bhts", logits, p_logits)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhts,hg->bgts", weights, p_weights).transpose(0, 2, 1, 3)


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["full", "chunked"])
@pytest.mark.parametrize("noise", ["elementwise", "shared_queries"])
def test_talking_heads_dropout_hits_the_mixed_weights(impl, noise, rng):
    """Both references (Mesh TF, tf-models) drop out U = softmax(L) @ P_w, after mixing.

    The layer is set up so that its output is U itself: inputs are one-hot positions,
    the value projection makes value[s] = e_s (V = S) and the output projection is the
    identity on the G * V = D concatenated heads.
    """
    rate, length, heads = 0.5, 16, 4
    cfg = tiny_model_config(attention="talking_heads", attention_dropout_rate=rate,
                      hidden_size=heads * length, num_heads=heads, key_size=8,
                      value_size=length,
                      talking_heads={"impl": impl, "query_chunk_size": 4,
                                     "dropout_noise": noise})
    x = jnp.broadcast_to(jnp.eye(length, cfg.hidden_size), (2, length, cfg.hidden_size))
    mask = jnp.ones((2, length), bool)
    module = attention_module(cfg)
    params = init_params(module, x, mask, True)
    params["value"]["kernel"] = jnp.broadcast_to(
        jnp.eye(cfg.hidden_size, length)[:, None, :], params["value"]["kernel"].shape)
    params["out"]["kernel"] = jnp.eye(cfg.hidden_size).reshape(params["out"]["kernel"].shape)
    out = module.apply({"params": params}, x, mask, False, rngs={"dropout": rng})
    out = np.asarray(out).reshape(2, length, heads, length)  # (B, T, G, S)

    def project(name):
        p = params[name]
        return np.einsum("btd,dnk->btnk", np.asarray(x), p["kernel"]) + np.asarray(p["bias"])

    mixed = numpy_talking_heads_weights(project("query"), project("key"),
                                        np.asarray(params["logits_mixing"]),
                                        np.asarray(params["weights_mixing"]))
    dropped = out == 0
    # Dropout before P_w leaves exact zeros only where all 4 mixed heads were dropped.
    assert 0.4 < dropped.mean() < 0.6
    np.testing.assert_allclose(out[~dropped], mixed[~dropped] / (1 - rate), rtol=1e-4,
                               atol=1e-6)
    if noise == "shared_queries":  # Mesh TF's noise shape: one mask for all queries
        np.testing.assert_array_equal(dropped, np.broadcast_to(dropped[:, :1], dropped.shape))
    else:
        assert not np.all(dropped == dropped[:, :1])


PADDING_CASES = {
    "multi_head": {},
    "multi_head_fused": {"attention_impl": "fused"},
    "talking_heads_mask_after": {"attention": "talking_heads"},
    "talking_heads_mask_before": {"attention": "talking_heads",
                                  "talking_heads": {"mask_placement": "before"}},
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(PADDING_CASES))
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_appending_padding_leaves_real_positions_unchanged(case, norm, rng):
    cfg = tiny_model_config(norm_placement=norm, **PADDING_CASES[case])
    model = BertForMaskedLM(cfg)
    ids, types, mask = random_batch(rng, length=8)
    params = init_params(model, ids, types, mask)
    # Scale the mixing matrices up so a leak through padded keys could not hide.
    params = jax.tree_util.tree_map_with_path(
        lambda path, p: p * 3.0 if "mixing" in jax.tree_util.keystr(path) else p, params)
    short = model.apply({"params": params}, ids, types, mask)["hidden_states"]
    pad_ids = jax.random.randint(jax.random.key(7), (3, 6), 1, cfg.vocab_size)
    long_ids = jnp.concatenate([ids, pad_ids], axis=1)
    long_mask = jnp.concatenate([mask, jnp.zeros_like(pad_ids)], axis=1)
    long = model.apply({"params": params}, long_ids, jnp.zeros_like(long_ids), long_mask)
    np.testing.assert_allclose(long["hidden_states"][:, :8], short, atol=1e-5)


def test_registry_lists_every_variant_and_rejects_unknown():
    # The variants shipped in attention/ (a plug-in from ATTENTION_PLUGINS may join them).
    assert shipped_variants() == ("general_bilinear", "multi_head", "talking_heads")
    with pytest.raises(KeyError, match="unknown"):
        attention.get("linear_attention")


def test_the_reference_truncated_mixing_init_has_scipys_truncated_spread():
    """th_init=truncated_fan_in draws as Mesh TF's VarianceScalingInitializer: a normal
    truncated at 2 stddev, not rescaled, so its stddev is scipy's truncnorm(-2, 2).std()
    (0.880) / sqrt(fan_in), and no entry lies beyond 2 / sqrt(fan_in)."""
    import scipy.stats

    from attention.talking_heads import mixing_init

    fan_in = 16
    init = mixing_init("truncated_fan_in")
    drawn = np.asarray(nn.unbox(init(jax.random.key(0), (fan_in, 40_000))))
    expected = scipy.stats.truncnorm(-2, 2).std() / np.sqrt(fan_in)
    assert drawn.std() == pytest.approx(expected, rel=0.01)
    assert np.abs(drawn).max() <= 2 / np.sqrt(fan_in) + 1e-6
    plain = np.asarray(nn.unbox(mixing_init("fan_in")(jax.random.key(0), (fan_in, 40_000))))
    assert plain.std() == pytest.approx(1 / np.sqrt(fan_in), rel=0.01)  # the default
