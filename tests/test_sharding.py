"""Sharding: a (data=2, fsdp=2, tensor=2) mesh over 8 fake CPU devices computes
what one device computes, with parameters laid out as the rules say."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from configs import pretrain
from input_pipeline.device_masking import DeviceMasker
from input_pipeline.tokenizer import SpecialIds
from models import BertForMaskedLM, ModelConfig
from training import sharding
from training.optimizer import make_optimizer
from training.pretrain import compile_for_mesh
from training.sharding import host_batch_to_global


def small_config(attention: str):
    config = pretrain.get_config(f"size=micro,attention={attention}")
    config.model.update(num_layers=2, hidden_size=32, num_heads=4, mlp_dim=64, vocab_size=64,
                        max_position_embeddings=16, dropout_rate=0.0,
                        attention_dropout_rate=0.0)
    config.data.max_seq_length = 16
    config.data.max_predictions_per_seq = 4
    config.batch_size = 8
    config.num_train_steps = 10
    config.optimizer.warmup_steps = 0
    return config


def random_batch(batch: int, length: int, predictions: int, vocab: int) -> dict:
    rng = np.random.default_rng(0)
    mask = np.ones((batch, length), np.int32)
    mask[::2, 12:] = 0
    return {
        "input_ids": rng.integers(5, vocab, (batch, length)).astype(np.int32),
        "token_type_ids": np.zeros((batch, length), np.int32),
        "attention_mask": mask,
        "masked_positions": rng.integers(1, 10, (batch, predictions)).astype(np.int32),
        "masked_ids": rng.integers(5, vocab, (batch, predictions)).astype(np.int32),
        "masked_weights": np.ones((batch, predictions), np.float32),
    }


def run_steps(config, mesh_spec, devices, num_steps=2, device_masking=False):
    model = BertForMaskedLM(ModelConfig.from_config(config.model))
    optimizer, schedule = make_optimizer(config.optimizer, config.num_train_steps)
    mesh = sharding.make_mesh(mesh_spec, devices)
    rules = sharding.DEFAULT_RULES
    masker = None
    batch = random_batch(8, 16, 4, 64)
    if device_masking:  # unmasked rows; the step masks them from each row's stream
        masker = DeviceMasker(SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4), 64, 4)
        batch = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
        batch["mask_stream"] = np.stack([np.zeros(8), np.ones(8), np.full(8, 3),
                                         np.arange(8)], axis=1).astype(np.int32)
    compiled = compile_for_mesh(model, optimizer, schedule, config, mesh, rules, masker)
    with mesh:
        state = compiled.init_fn(jax.random.key(0))
    history = []
    for _ in range(num_steps):
        global_batch = host_batch_to_global(batch, mesh, rules)
        with mesh:
            state, metrics = compiled.train_step(state, global_batch)
        history.append(jax.device_get(metrics))
    return state, history


_ONE_DEVICE_RUNS: dict = {}


def one_device_run(config, device_masking=False):
    """run_steps on one device, once per (config, masking) in a session: the multi-head
    sharding test and the accumulation test compare against the same one-device run,
    and both device-masking cases against its masking twin; each is trained once."""
    key = (config.to_json(), device_masking)
    if key not in _ONE_DEVICE_RUNS:
        _ONE_DEVICE_RUNS[key] = run_steps(config, {"data": 1}, jax.devices()[:1],
                                          device_masking=device_masking)
    return _ONE_DEVICE_RUNS[key]


@pytest.mark.slow
@pytest.mark.parametrize("attention,sparse_final_layer",
                         [("multi_head", True), ("talking_heads", False)])
def test_sharded_run_equals_single_device_run(attention, sparse_final_layer):
    assert jax.device_count() == 8, "conftest sets 8 fake CPU devices"
    config = small_config(attention)
    config.model.sparse_final_layer = sparse_final_layer
    single_state, single = one_device_run(config)
    sharded_state, sharded = run_steps(config, {"data": 2, "fsdp": 2, "tensor": 2},
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
    config = small_config("multi_head")
    single_state, single = one_device_run(config, device_masking=True)
    config.grad_accum_steps = grad_accum
    devices = jax.devices() if len(mesh_spec) > 1 else jax.devices()[:1]
    other_state, other = run_steps(config, mesh_spec, devices, device_masking=True)
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
    config = small_config("multi_head")
    whole_state, whole = one_device_run(config)
    config.grad_accum_steps = 2
    accum_state, accum = run_steps(config, {"data": 1}, jax.devices()[:1])
    for a, b in zip(whole, accum, strict=True):
        for key in ("loss_sum", "correct", "weight", "grad_norm"):
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                 jax.device_get(whole_state["params"]), jax.device_get(accum_state["params"]))
