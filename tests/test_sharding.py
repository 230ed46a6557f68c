"""Sharding: a (data=2, fsdp=2, tensor=2) mesh over 8 fake CPU devices computes
what one device computes, with parameters laid out as the rules say."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers import one_device_mlm_run, run_mlm_steps, sharding_config
from jax.sharding import PartitionSpec as P

from training import sharding


@pytest.mark.slow
@pytest.mark.parametrize("attention,sparse_final_layer",
                         [("multi_head", True), ("talking_heads", False)])
def test_sharded_run_equals_single_device_run(attention, sparse_final_layer):
    assert jax.device_count() == 8, "conftest sets 8 fake CPU devices"
    config = sharding_config(attention)
    config.model.sparse_final_layer = sparse_final_layer
    single_state, single = one_device_mlm_run(config)
    sharded_state, sharded = run_mlm_steps(config, {"data": 2, "fsdp": 2, "tensor": 2},
                                       jax.devices())
    for a, b in zip(single, sharded, strict=True):
        for key in ("loss_sum", "correct", "weight", "grad_norm"):
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                 jax.device_get(single_state["params"]), jax.device_get(sharded_state["params"]))

    params = sharded_state["params"]["bert"]
    layer = params["encoder"]["layer_0"]
    # Rules: embed -> fsdp, heads -> tensor, mlp -> tensor, vocab -> tensor, kv unsharded.
    assert layer["attention"]["query"]["kernel"].sharding.spec == P("fsdp", "tensor", None)
    assert layer["attention"]["out"]["kernel"].sharding.spec == P("tensor", None, "fsdp")
    assert layer["mlp"]["intermediate"]["kernel"].sharding.spec == P("fsdp", "tensor")
    assert params["embeddings"]["word"]["embedding"].sharding.spec == P("tensor", "fsdp")
    query = layer["attention"]["query"]["kernel"]
    assert query.addressable_shards[0].data.shape == (16, 2, 8)  # (32/2, 4/2, 8)
    # The optimizer state follows its parameter.
    mu = sharded_state["opt_state"]
    leaves = [x for x in jax.tree.leaves(mu) if getattr(x, "shape", None) == (32, 4, 8)]
    assert leaves and all(x.sharding.spec == P("fsdp", "tensor", None) for x in leaves)


@pytest.mark.slow
@pytest.mark.parametrize("mesh_spec,grad_accum", [({"data": 2, "fsdp": 2, "tensor": 2}, 1),
                                                  ({"data": 1}, 2)])
def test_device_masking_is_the_same_on_any_mesh_and_accumulation(mesh_spec, grad_accum):
    """Masks come from each row's stream, so neither the layout nor micro-batching
    changes them: the same losses and parameters as one device, one batch."""
    config = sharding_config("multi_head")
    single_state, single = one_device_mlm_run(config, device_masking=True)
    config.grad_accum_steps = grad_accum
    devices = jax.devices() if len(mesh_spec) > 1 else jax.devices()[:1]
    other_state, other = run_mlm_steps(config, mesh_spec, devices, device_masking=True)
    assert single[0]["weight"] > 0
    for a, b in zip(single, other, strict=True):
        for key in ("loss_sum", "correct", "weight", "grad_norm"):
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                 jax.device_get(single_state["params"]), jax.device_get(other_state["params"]))


def test_mesh_shape_fills_and_rejects():
    assert sharding.mesh_shape({"data": -1, "tensor": 2}, 8) == (4, 1, 2)
    with pytest.raises(sharding.ShardingError, match="does not fit 8 devices"):
        sharding.mesh_shape({"data": 3}, 8)
    with pytest.raises(sharding.ShardingError, match="unknown axes"):
        sharding.mesh_shape({"model": 2}, 8)


@pytest.mark.slow
def test_gradient_accumulation_equals_one_big_batch():
    config = sharding_config("multi_head")
    whole_state, whole = one_device_mlm_run(config)
    config.grad_accum_steps = 2
    accum_state, accum = run_mlm_steps(config, {"data": 1}, jax.devices()[:1])
    for a, b in zip(whole, accum, strict=True):
        for key in ("loss_sum", "correct", "weight", "grad_norm"):
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                 jax.device_get(whole_state["params"]), jax.device_get(accum_state["params"]))
