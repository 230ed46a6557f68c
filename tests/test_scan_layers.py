"""Scanned layers (model.scan_layers) against unrolled ones with the same parameters
restacked (models/layout.py): the same loss, gradients and optimizer step for every
attention code path, in both directions of the conversion."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import ATTENTION_VARIANTS, tiny_model_config

from models import BertForMaskedLM, BertForSequenceClassification, ModelConfig, layout
from training import steps

TOLERANCE = 1e-6  # fp32, matmuls at "highest" (tests/conftest.py)


def mlm_batch(cfg: ModelConfig, seed: int = 0, batch: int = 3, length: int = 10,
              predictions: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, cfg.vocab_size, (batch, length)).astype(np.int32)
    mask = np.ones((batch, length), np.int32)
    mask[0, length - 3:] = 0  # padding: the mask must reach every scanned layer
    positions = np.sort(np.stack([rng.choice(length - 3, predictions, replace=False)
                                  for _ in range(batch)]), axis=1).astype(np.int32)
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask,
            "masked_positions": positions,
            "masked_ids": rng.integers(1, cfg.vocab_size, positions.shape).astype(np.int32),
            "masked_weights": np.ones(positions.shape, np.float32)}


def shapes(cfg: ModelConfig, batch: dict) -> dict:
    variables = jax.eval_shape(lambda: BertForMaskedLM(cfg).init(
        jax.random.key(0), batch["input_ids"], batch["token_type_ids"],
        batch["attention_mask"], batch["masked_positions"]))
    return nn.unbox(variables)["params"]


def init(cfg: ModelConfig, batch: dict, seed: int = 0) -> dict:
    """Random numpy parameters of the model's shapes, every one off its init value
    (LayerNorm scales around 1, the rest around 0, mixing off the identity): nothing is
    compiled, and a misplaced leaf cannot hide behind an init."""
    rng = np.random.default_rng(seed)

    def draw(path, shape):
        centre = 1.0 if jax.tree_util.keystr(path).endswith("['scale']") else 0.0
        return (centre + 0.1 * rng.standard_normal(shape.shape)).astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, shapes(cfg, batch))


def loss_grads_and_step(cfg: ModelConfig, params: dict, batch: dict):
    """(loss, gradients, the parameters after one AdamW step), in one compiled program.

    Adam's first step moves a weight by lr * g / (|g| + eps). At the default eps (1e-8) a
    gradient at rounding level, as the key bias's is (zero in exact arithmetic: softmax
    ignores a shift per query), becomes a step of up to lr made of rounding noise, which
    two equal programs compiled differently do not share. eps=1e-3 keeps the step as
    close as the gradients are."""
    optimizer = optax.adamw(1e-2, eps=1e-3)

    def loss(p):
        sums = steps.MLMObjective.sums(BertForMaskedLM(cfg), p, batch, deterministic=True)
        return sums["loss_sum"] / sums["weight"]

    def step(p):
        value, grads = jax.value_and_grad(loss)(p)
        updates, _ = optimizer.update(grads, optimizer.init(p), p)
        return value, grads, optax.apply_updates(p, updates)

    return jax.jit(step)(params)


def assert_trees_close(a, b, tolerance=TOLERANCE):
    flat_a = jax.tree_util.tree_leaves_with_path(a)
    flat_b = jax.tree_util.tree_leaves_with_path(b)
    assert [p for p, _ in flat_a] == [p for p, _ in flat_b]
    for (path, x), (_, y) in zip(flat_a, flat_b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=tolerance,
                                   rtol=tolerance, err_msg=jax.tree_util.keystr(path))


# Every variant and code path but those that differ from one here only inside the
# attention (projections="logits"/"weights", fixed head size): the scan never looks in.
CASES = {
    **{name: ATTENTION_VARIANTS[name] for name in (
        "multi_head", "multi_head_large_key", "multi_head_fused", "talking_heads_hk_hv",
        "talking_heads_chunked", "talking_heads_dynamic", "general_bilinear")},
    "pre_ln_remat_dots": {"norm_placement": "pre", "remat": "dots"},
    "three_layers_sparse_final": {"num_layers": 3, "sparse_final_layer": True},
    "remat_full_sparse_final": {"remat": "full", "sparse_final_layer": True},
    "talking_heads_sparse_final": {"attention": "talking_heads", "sparse_final_layer": True},
    # One layer and a sparse final layer: the scan runs no layer, the last its own slice.
    "one_layer_sparse_final": {"num_layers": 1, "sparse_final_layer": True},
    # bf16 compute: the scan's carry must keep the layers' dtype (fp32 params).
    "bfloat16_pre_ln": {"dtype": "bfloat16", "norm_placement": "pre"},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_scanned_equals_unrolled(name):
    overrides = {k: (dict(v) if isinstance(v, dict) else v) for k, v in CASES[name].items()}
    unrolled = tiny_model_config(**{"num_layers": 2, **overrides})
    scanned = unrolled.replace(scan_layers=True)
    batch = mlm_batch(unrolled)
    params = init(unrolled, batch)
    stacked = layout.to_layout(params, scanned=True)
    assert "layers" in stacked["bert"]["encoder"] and "layer_0" not in stacked["bert"]["encoder"]
    # The scanned model's own init has exactly this tree (names and shapes).
    fresh = shapes(scanned, batch)
    assert jax.tree.map(np.shape, fresh) == jax.tree.map(np.shape, stacked)

    # bf16 rounds where XLA fuses differently; the fp32 cases hold the 1e-6 bound.
    tolerance = TOLERANCE if unrolled.dtype == "float32" else 2e-2
    loss_u, grads_u, after_u = loss_grads_and_step(unrolled, params, batch)
    loss_s, grads_s, after_s = loss_grads_and_step(scanned, stacked, batch)
    assert abs(float(loss_u) - float(loss_s)) <= tolerance * abs(float(loss_u))
    assert_trees_close(layout.to_layout(grads_s, scanned=False), grads_u, tolerance)
    # One AdamW step from each: the same parameters after it.
    assert_trees_close(layout.to_layout(after_s, scanned=False), after_u, tolerance)


def test_conversion_round_trips_and_orders_layers_past_nine():
    encoder = {f"layer_{i}": {"w": np.full((2,), i, np.float32)} for i in range(12)}
    encoder["final_norm"] = {"scale": np.ones(3, np.float32)}
    stacked = layout.to_layout({"bert": {"encoder": encoder}}, scanned=True)
    np.testing.assert_array_equal(stacked["bert"]["encoder"]["layers"]["w"][:, 0],
                                  np.arange(12))
    assert layout.is_scanned(stacked) and not layout.is_scanned({"bert": {"encoder": encoder}})
    back = layout.to_layout(stacked, scanned=False)
    assert jax.tree.map(np.shape, back) == jax.tree.map(np.shape, {"bert": {"encoder": encoder}})
    np.testing.assert_array_equal(back["bert"]["encoder"]["layer_11"]["w"], 11)
    # Already in the asked layout: unchanged.
    again = layout.to_layout(stacked, scanned=True)
    assert jax.tree.map(np.shape, again) == jax.tree.map(np.shape, stacked)
    with pytest.raises(ValueError, match="layer_0..layer_N-1"):
        layout.to_layout({"encoder": {"layer_0": {}, "layer_2": {}}}, scanned=True)


def test_scanned_parameters_carry_an_unsharded_layer_axis():
    cfg = tiny_model_config(num_layers=2, scan_layers=True)
    ids = jnp.zeros((1, 4), jnp.int32)
    boxed = jax.eval_shape(lambda: BertForSequenceClassification(cfg, num_labels=2).init(
        jax.random.key(0), ids))["params"]
    specs = nn.get_partition_spec(boxed)
    kernel_spec = specs["bert"]["encoder"]["layers"]["attention"]["query"]["kernel"]
    assert kernel_spec[0] == "layers"
    from training.sharding import DEFAULT_RULES

    assert dict(DEFAULT_RULES)["layers"] is None
