"""Talking heads' dynamic projections (model.talking_heads.dynamic_projections, Mesh
TensorFlow's x2l, m2l, x2w, m2w): the layer against a re-implementation written from
the reference's equations (values and every gradient, fp32, both computation paths,
h_k/h/h_v, key/value sizes, padded keys, grouped mixing, the mask before P_l), the
reference's init scale, parameter and FLOP counts, the refusals and resume."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from helpers import init_params, tiny_model_config

import attention
from common.errors import ConfigError

ALL = "x2l+m2l+x2w+m2w"
# (query/key heads, softmax heads, value heads) = (6, 4, 2): P_l is 6 x 4, P_w 4 x 2.
HEADS = {"num_logit_heads": 6, "num_value_heads": 2}


def config(dynamic: str = ALL, **th):
    settings = {**HEADS, "dynamic_projections": dynamic, "dynamic_init_scale": 1.0, **th}
    return tiny_model_config(attention="talking_heads", key_size=5, value_size=7,
                             talking_heads=settings)


def block_diagonal(name, p):
    """A grouped static matrix (R, n, h) as its (R n, R h) matrix, a grouped dynamic map
    (D, R, n, h) as (D, R n, R h); full ones unchanged."""
    p = np.asarray(p)
    grouped = p.ndim == (4 if "_from_" in name else 3)
    if not grouped:
        return p
    if p.ndim == 3:
        return scipy.linalg.block_diag(*p)
    return np.stack([scipy.linalg.block_diag(*row) for row in p])


def reference(xp, params, x, mask, dynamic, mask_before=False):
    """Mesh TF's TalkingHeadsSelfAttention written out: every term its own einsum in the
    reference's [query, memory, heads] layout, with BERT's projections (biases) and
    1/sqrt(K) logits. xp is numpy or jax.numpy (for gradients)."""
    def project(name):
        return xp.einsum("btd,dnk->btnk", x, params[name]["kernel"]) + params[name]["bias"]

    q, k, v = project("query"), project("key"), project("value")
    bias = xp.where(mask, 0.0, -1e9)[:, None, :, None]  # (b, 1, s, 1)
    p = xp.einsum("btnk,bsnk->btsn", q, k) / np.sqrt(q.shape[-1])

    def talk(inp, side, mask_bias=None):
        """The reference's talking_heads(): the static matrix plus x2*/m2* terms."""
        out = xp.einsum("btsn,nh->btsh", inp, params[f"{side}_mixing"])
        if f"x2{side[0]}" in dynamic:  # from the query antecedent X
            px = xp.einsum("btd,dnh->btnh", x, params[f"{side}_mixing_from_queries"])
            out = out + xp.einsum("btsn,btnh->btsh", inp, px)
        if f"m2{side[0]}" in dynamic:  # from the memory antecedent M (here: x again)
            pm = xp.einsum("bsd,dnh->bsnh", x, params[f"{side}_mixing_from_keys"])
            out = out + xp.einsum("btsn,bsnh->btsh", inp, pm)
        return out

    if mask_before:
        logits = talk(p + bias, "logits")
        logits = xp.where(mask[:, None, :, None], logits, bias)
    else:
        logits = talk(p, "logits") + bias
    h = xp.exp(logits - logits.max(axis=2, keepdims=True))
    h = h / h.sum(axis=2, keepdims=True)
    weights = talk(h, "weights")
    u = xp.einsum("btsg,bsgv->btgv", weights, v)
    return xp.einsum("btgv,gvd->btd", u, params["out"]["kernel"]) + params["out"]["bias"]


def run(cfg, params, x, mask):
    return attention.get(cfg.attention)(cfg).apply({"params": params}, x, mask, True)


def as_full(params):
    return {k: (block_diagonal(k, v) if "mixing" in k else v) for k, v in params.items()}


CASES = {
    "all_full": (ALL, {}),
    "all_chunked": (ALL, {"impl": "chunked", "query_chunk_size": 4}),
    "all_grouped_chunked": (ALL, {"groups": 2, "impl": "chunked", "query_chunk_size": 4}),
    "x2l": ("x2l", {}),
    "m2l_chunked": ("m2l", {"impl": "chunked", "query_chunk_size": 3}),
    "m2l_x2w": ("m2l+x2w", {}),
    "m2w_mask_before": ("m2w", {"mask_placement": "before"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_layer_equals_the_reference_values_and_gradients(case, rng):
    dynamic, th = CASES[case]
    cfg = config(dynamic, **th)
    x = jax.random.normal(rng, (2, 10, 32))
    mask = jnp.ones((2, 10), bool).at[1, 6:].set(False)
    params = init_params(attention.get("talking_heads")(cfg), x, mask, True)
    for name in ("x2l", "m2l", "x2w", "m2w"):
        side = "logits" if name[-1] == "l" else "weights"
        at = "queries" if name[0] == "x" else "keys"
        assert (f"{side}_mixing_from_{at}" in params) == (name in dynamic)
    mask_before = th.get("mask_placement") == "before"
    full = jax.tree.map(np.asarray, as_full(params))
    want = reference(np, jax.tree.map(lambda a: a.astype(np.float32), full),
                     np.asarray(x), np.asarray(mask), dynamic, mask_before)
    np.testing.assert_allclose(run(cfg, params, x, mask), want, rtol=1e-6, atol=1e-6)

    def loss(out):
        return jnp.sum(jnp.sin(out))

    got = jax.grad(lambda p, x: loss(run(cfg, p, x, mask)), argnums=(0, 1))(params, x)
    ref = jax.grad(lambda p, x: loss(reference(jnp, p, x, mask, dynamic, mask_before)),
                   argnums=(0, 1))(jax.tree.map(jnp.asarray, full), x)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6, atol=1e-6)  # the input's
    for name, grad in got[0].items():
        ours = jax.tree.map(np.asarray, grad)
        theirs = jax.tree.map(np.asarray, ref[0][name])
        if "mixing" in name and np.ndim(ours) == (4 if "_from_" in name else 3):  # grouped
            theirs = blocks_of(theirs, ours.shape)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
                     ours, theirs)


def blocks_of(full, block_shape):
    """The diagonal blocks (R, n, h) of (R n, R h), or (D, R, n, h) of (D, R n, R h)."""
    *lead, groups, n, h = block_shape
    take = [full[..., i * n:(i + 1) * n, i * h:(i + 1) * h] for i in range(groups)]
    return np.stack(take, axis=len(lead))


@pytest.mark.slow
def test_the_dynamic_maps_start_at_the_reference_scale():
    """Variance dynamic_init_scale / (heads mixed from x D); the static matrices as
    without dynamic terms."""
    heads, width = 16, 256
    cfg = tiny_model_config(attention="talking_heads", hidden_size=width, num_heads=heads,
                            talking_heads={"dynamic_projections": ALL})
    x = jnp.ones((1, 2, width))
    params = init_params(attention.get("talking_heads")(cfg), x, jnp.ones((1, 2), bool),
                         True)
    for name in ("logits_mixing_from_queries", "logits_mixing_from_keys",
                 "weights_mixing_from_queries", "weights_mixing_from_keys"):
        kernel = np.asarray(params[name])
        assert kernel.shape == (width, heads, heads)
        want = (1e-2 / (heads * width)) ** 0.5
        assert abs(kernel.std() / want - 1) < 0.02, name  # 65536 draws: 0.3% std error
    assert abs(np.asarray(params["logits_mixing"]).std() * heads ** 0.5 - 1) < 0.1


def test_parameters_and_flops_match_a_count_by_hand():
    from models.flops import (
        flop_count,
        key_value_flops_per_token,
        layer_flops_per_token,
        parameter_counts,
    )

    length, width = 16, 32
    static = config("")
    # per layer: x2l, m2l (D x 6 x 4 each), x2w, m2w (D x 4 x 2 each); two layers
    assert parameter_counts(config())[0] - parameter_counts(static)[0] == \
        2 * width * 2 * (6 * 4 + 4 * 2)
    # Per token, beyond the static mixing: each side mixes twice (x and m terms) and four
    # dense maps of D x matrix entries.
    extra = layer_flops_per_token(config(), length) - layer_flops_per_token(static, length)
    assert extra == 2 * length * (6 * 4 + 4 * 2) + 2 * width * 2 * (6 * 4 + 4 * 2)
    # One dynamic term on a side is folded into the static matrix: no second mixing.
    one = layer_flops_per_token(config("x2l"), length) - layer_flops_per_token(static, length)
    assert one == 2 * width * 6 * 4
    # Grouped: every matrix is its R blocks, so every term is 1/R of the full one.
    assert layer_flops_per_token(config(groups=2), length) - layer_flops_per_token(
        config("", groups=2), length) == extra / 2
    # The key-side maps (m2l, m2w) run at every position in a sparse final layer.
    sparse, sparse_static = (c.replace(sparse_final_layer=True) for c in (config(), static))
    assert key_value_flops_per_token(sparse) - key_value_flops_per_token(sparse_static) == \
        2 * width * (6 * 4 + 4 * 2)
    assert flop_count(sparse, length).skipped_per_unpredicted_token == \
        layer_flops_per_token(sparse, length) - key_value_flops_per_token(sparse)


def test_the_memory_model_counts_the_dynamic_matrices():
    from models.memory import layer_bytes

    tokens, length = 32, 16
    # fp32 matrices per query token (x2l 6x4, x2w 4x2) and per key token (m2l, m2w)
    assert layer_bytes(config(), tokens, length) - layer_bytes(config(""), tokens, length) \
        == 4 * 2 * (6 * 4 + 4 * 2) * tokens


@pytest.mark.parametrize("given,message", [
    ("x2q", r"'x2q': give a subset of x2l, m2l, x2w, m2w"),
    ("m2w+x2l", r"in that order \(write 'x2l\+m2w'\)"),
    ("x2l+x2l", r"each once"),
    ("x2l,m2w", r"'\+'-joined"),
])
def test_a_bad_list_is_one_error_naming_the_field(given, message):
    with pytest.raises(ConfigError, match=r"model\.talking_heads\.dynamic_projections=.*"
                                          + message):
        config(given)


def test_a_term_of_a_mixing_that_is_off_is_refused():
    with pytest.raises(ConfigError, match=r"has x2w, a term of the weights mixing, but "
                                          r"projections='logits' has no weights mixing"):
        tiny_model_config(attention="talking_heads", talking_heads={
            "projections": "logits", "dynamic_projections": "x2l+x2w"})
    with pytest.raises(ConfigError, match=r"dynamic_init_scale=-1.0 must be a finite number >= 0"):
        config(dynamic_init_scale=-1.0)


def test_the_config_args_reach_the_settings():
    from configs import model as model_configs
    from models import ModelConfig

    cfg = ModelConfig.from_config(model_configs.get_config(
        "size=micro,attention=talking_heads,th_dynamic=x2l+m2w,th_dynamic_scale=0.1").model)
    assert cfg.talking_heads.dynamic == ("x2l", "m2w")
    assert cfg.talking_heads.dynamic_init_scale == 0.1


@pytest.mark.parametrize("changed", [{"dynamic_projections": "x2l"},
                                     {"dynamic_init_scale": 0.5}])
def test_resume_refuses_a_change_of_the_dynamic_settings(changed):
    from training.pretrain_loop import TrainingError
    from training.resume import check_same_architecture

    saved = {"model": config().to_dict()}
    name = next(iter(changed))
    with pytest.raises(TrainingError, match=f"talking_heads.{name}"):
        check_same_architecture(saved, config(**changed), "runs/x")


@pytest.mark.slow
def test_a_sharded_run_equals_one_device():
    """Dynamic maps with grouped mixing on (data=2, fsdp=2, tensor=2) of 8 fake devices:
    2 steps give one device's losses and parameters; the maps' D axis is split over
    fsdp and, grouped, their group axis over tensor."""
    from helpers import one_device_mlm_run, run_mlm_steps, sharding_config
    from jax.sharding import PartitionSpec as P

    config = sharding_config("talking_heads")
    config.model.talking_heads.groups = 2
    config.model.talking_heads.dynamic_projections = ALL
    config.model.talking_heads.dynamic_init_scale = 1.0
    single_state, single = one_device_mlm_run(config)
    sharded_state, sharded = run_mlm_steps(config, {"data": 2, "fsdp": 2, "tensor": 2},
                                           jax.devices())
    for a, b in zip(single, sharded, strict=True):
        np.testing.assert_allclose(a["loss_sum"], b["loss_sum"], rtol=1e-5, atol=1e-5)
    layer = sharded_state["params"]["bert"]["encoder"]["layer_0"]["attention"]
    assert layer["logits_mixing_from_queries"].sharding.spec == P("fsdp", "tensor", None, None)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                 jax.device_get(single_state["params"]), jax.device_get(sharded_state["params"]))


@pytest.mark.parametrize("field,value", [("dynamic_init_scale", float("inf")),
                                         ("groups", True), ("query_chunk_size", False)])
def test_an_infinite_scale_or_a_boolean_count_is_refused(field, value):
    with pytest.raises(ConfigError, match=f"model.talking_heads.{field}="):
        config(**{field: value})


def test_built_settings_pass_through_from_config():
    from models import ModelConfig

    cfg = config()
    assert ModelConfig.from_config({**cfg.to_dict(), "talking_heads": cfg.talking_heads}) == cfg
