"""Talking heads with grouped (block-diagonal) mixing, model.talking_heads.groups = R:
against the full mixing with scipy's block-diagonal matrices (values and gradients,
both computation paths, h_k/h/h_v, masks), R = h as multi-head attention, parameter and
FLOP counts, the refusals, resume, and the group axis sharded over `tensor`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from helpers import (
    init_params,
    mlm_batch,
    one_device_mlm_run,
    run_mlm_steps,
    sharding_config,
    tiny_model_config,
)

import attention
from attention.talking_heads import mix_heads
from common.errors import ConfigError


def grouped_config(groups: int, **th):
    # h_k = 6, h = 4, h_v = 2 heads: groups of 3, 2 and 1 at R = 2
    settings = {"num_logit_heads": 6, "num_value_heads": 2, "groups": groups, **th}
    return tiny_model_config(attention="talking_heads", key_size=5, value_size=7,
                             talking_heads=settings)


def run(cfg, params, x, mask):
    return attention.get(cfg.attention)(cfg).apply({"params": params}, x, mask, True)


def test_mixing_a_group_at_a_time_is_the_block_diagonal_matrix():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 3, 5))
    blocks = rng.normal(size=(2, 3, 2))
    want = np.einsum("bnts,nh->bhts", x, scipy.linalg.block_diag(*blocks))
    np.testing.assert_allclose(mix_heads(jnp.asarray(x), jnp.asarray(blocks)), want,
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("impl", ["full", "chunked"])
def test_grouped_equals_full_mixing_with_block_diagonal_matrices(impl, rng):
    """Values and every gradient, fp32, padded keys: the grouped parameters' gradients
    are the diagonal blocks of the full matrices' gradients."""
    grouped = grouped_config(2, impl=impl, query_chunk_size=4)
    full = grouped_config(1, impl=impl, query_chunk_size=4)
    x = jax.random.normal(rng, (2, 10, 32))
    mask = jnp.ones((2, 10), bool).at[1, 6:].set(False)
    params = init_params(attention.get("talking_heads")(grouped), x, mask, True)
    assert params["logits_mixing"].shape == (2, 3, 2)
    assert params["weights_mixing"].shape == (2, 2, 1)

    def as_full(p):
        return {**p, **{k: jnp.asarray(scipy.linalg.block_diag(*np.asarray(p[k])))
                        for k in ("logits_mixing", "weights_mixing")}}

    np.testing.assert_allclose(run(grouped, params, x, mask),
                               run(full, as_full(params), x, mask), rtol=1e-6, atol=1e-6)

    def loss(cfg, p):
        return jnp.sum(jnp.sin(run(cfg, p, x, mask)))

    g_grouped = jax.grad(lambda p: loss(grouped, p))(params)
    g_full = jax.grad(lambda p: loss(full, p))(as_full(params))
    for name in ("logits_mixing", "weights_mixing"):
        blocks = np.asarray(g_grouped[name])
        n, h = blocks.shape[1:]
        diagonal = [np.asarray(g_full[name])[i * n:(i + 1) * n, i * h:(i + 1) * h]
                    for i in range(2)]
        np.testing.assert_allclose(blocks, np.stack(diagonal), rtol=1e-6, atol=1e-6)
    for name in ("query", "key", "value", "out"):
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
                     g_grouped[name], g_full[name])


def test_one_group_per_head_with_unit_mixing_is_multi_head(rng):
    heads = 4
    mh = tiny_model_config(key_size=8, value_size=8)
    th = tiny_model_config(key_size=8, value_size=8, attention="talking_heads",
                           talking_heads={"groups": heads, "init": "identity"})
    x = jax.random.normal(rng, (2, 9, 32))
    mask = jnp.ones((2, 9), bool).at[0, 7:].set(False)
    mh_params = init_params(attention.get("multi_head")(mh), x, mask, True)
    th_params = init_params(attention.get("talking_heads")(th), x, mask, True, seed=3)
    np.testing.assert_array_equal(th_params["logits_mixing"], np.ones((heads, 1, 1)))
    np.testing.assert_allclose(run(th, {**th_params, **mh_params}, x, mask),
                               run(mh, mh_params, x, mask), rtol=1e-6, atol=1e-6)


def test_parameters_and_flops_are_the_blocks_only():
    from models.flops import layer_flops_per_token, parameter_counts

    length = 16
    full, grouped = grouped_config(1), grouped_config(2)
    # P_l (6 x 4) and P_w (4 x 2) per layer, two layers; grouped: half of each
    mixing = 2 * (6 * 4 + 4 * 2)
    assert parameter_counts(full)[0] - parameter_counts(grouped)[0] == mixing // 2
    # mixing FLOPs per token: 2 n (N H + H G) / R
    extra = layer_flops_per_token(full, length) - layer_flops_per_token(grouped, length)
    assert extra == 2 * length * (6 * 4 + 4 * 2) / 2


def test_groups_must_divide_every_head_kind():
    with pytest.raises(ConfigError, match=r"groups=4 does not divide the 6 heads of "
                                          r"num_logit_heads"):
        grouped_config(4)
    with pytest.raises(ConfigError, match=r"talking_heads.groups=0 must be a positive"):
        grouped_config(0)


def test_resume_refuses_a_change_of_groups():
    from training.pretrain_loop import TrainingError
    from training.resume import check_same_architecture

    saved = {"model": grouped_config(1).to_dict()}
    with pytest.raises(TrainingError, match="talking_heads.groups"):
        check_same_architecture(saved, grouped_config(2), "runs/x")


def compiled_collectives(config, mesh_spec) -> dict:
    """{kind: (count, bytes)} of the compiled train step on 8 fake devices."""
    from models import BertForMaskedLM, ModelConfig
    from training import fit_check, sharding
    from training.optimizer import make_optimizer
    from training.pretrain import compile_for_mesh

    model = BertForMaskedLM(ModelConfig.from_config(config.model))
    optimizer, schedule = make_optimizer(config.optimizer, config.num_train_steps)
    mesh = sharding.make_mesh(mesh_spec, jax.devices())
    compiled = compile_for_mesh(model, optimizer, schedule, config, mesh,
                                sharding.DEFAULT_RULES, None)
    batch = sharding.host_batch_to_global(mlm_batch(8, 16, 4, 64), mesh,
                                          sharding.DEFAULT_RULES)
    with mesh:
        text = compiled.train_step.lower(compiled.abstract_state, batch).compile().as_text()
    return fit_check.collectives(text)


@pytest.mark.slow
def test_the_group_axis_shards_over_tensor_without_exchanging_heads():
    """2 steps on (data=2, fsdp=2, tensor=2) of 8 fake devices equal one device's, the
    mixing blocks are split by group over `tensor`, and the scores are gathered less."""
    from jax.sharding import PartitionSpec as P

    config = sharding_config("talking_heads")
    config.model.talking_heads.groups = 2
    single_state, single = one_device_mlm_run(config)
    mesh = {"data": 2, "fsdp": 2, "tensor": 2}
    sharded_state, sharded = run_mlm_steps(config, mesh, jax.devices())
    for a, b in zip(single, sharded, strict=True):
        np.testing.assert_allclose(a["loss_sum"], b["loss_sum"], rtol=1e-5, atol=1e-5)
    layer = sharded_state["params"]["bert"]["encoder"]["layer_0"]["attention"]
    assert layer["logits_mixing"].sharding.spec == P("tensor", None, None)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                 jax.device_get(single_state["params"]), jax.device_get(sharded_state["params"]))
    # Full mixing gathers every head's scores across the tensor shards before P_l and
    # P_w (all-gather x45, 64 KiB here); grouped, each shard mixes its own groups
    # (x37, 44 KiB), and neither needs an all-to-all.
    grouped = compiled_collectives(config, mesh)
    config.model.talking_heads.groups = 1
    full = compiled_collectives(config, mesh)
    assert "all-to-all" not in grouped
    assert grouped["all-gather"][0] < full["all-gather"][0]
    assert grouped["all-gather"][1] < full["all-gather"][1]
