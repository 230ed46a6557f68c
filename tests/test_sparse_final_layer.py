"""sparse_final_layer: the last layer computed only where the loss reads it.

The reference is the same model with the layer computed everywhere: MLM logits
and gradients at the masked positions, and the classifier's output, must agree
to fp32 rounding for every attention variant, both LayerNorm placements,
padding and rematerialisation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ATTENTION_VARIANTS, init_params, random_batch, tiny_model_config

from models import BertForMaskedLM, BertForSequenceClassification
from models.flops import flop_count

# Duplicates, unsorted and padded positions (the batch pads from 9 on).
POSITIONS = jnp.array([[0, 3, 3, 10], [11, 2, 1, 0], [5, 6, 7, 8]])


def mlm_loss_and_grads(cfg, params, ids, types, mask):
    def loss(p):
        logits = BertForMaskedLM(cfg).apply({"params": p}, ids, types, mask, POSITIONS)[
            "mlm_logits"]
        return jnp.mean(jax.nn.logsumexp(logits, -1) - logits[..., 0]), logits

    (value, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return value, logits, grads


# Every code path the final layer can take, each variant once (the suite's time budget).
@pytest.mark.slow
@pytest.mark.parametrize("variant,norm", [
    ("multi_head", "post"), ("multi_head_fixed_head", "pre"), ("multi_head_fused", "post"),
    ("talking_heads_hk_hv", "pre"), ("talking_heads_chunked", "post"),
    ("talking_heads_dynamic", "post"),  # x2l/x2w read the query rows' hidden states
])
def test_sparse_final_layer_equals_dense_values_and_gradients(variant, norm, rng):
    fields = dict(ATTENTION_VARIANTS[variant])
    fields["talking_heads"] = dict(fields.get("talking_heads", {}))
    cfg = tiny_model_config(norm_placement=norm, **fields)
    ids, types, mask = random_batch(rng, pad_from=9)
    params = init_params(BertForMaskedLM(cfg), ids, types, mask)
    dense = mlm_loss_and_grads(cfg, params, ids, types, mask)
    sparse = mlm_loss_and_grads(cfg.replace(sparse_final_layer=True), params, ids, types, mask)
    np.testing.assert_allclose(sparse[1], dense[1], atol=1e-5)
    np.testing.assert_allclose(sparse[0], dense[0], atol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), sparse[2], dense[2])


@pytest.mark.slow
def test_sparse_final_layer_with_remat_and_hidden_state_shape(rng):
    cfg = tiny_model_config(attention="talking_heads", remat="full", sparse_final_layer=True)
    ids, types, mask = random_batch(rng)
    params = init_params(BertForMaskedLM(cfg), ids, types, mask)
    out = BertForMaskedLM(cfg).apply({"params": params}, ids, types, mask, POSITIONS)
    assert out["hidden_states"].shape == (*POSITIONS.shape, cfg.hidden_size)
    reference = BertForMaskedLM(cfg.replace(remat="none", sparse_final_layer=False)).apply(
        {"params": params}, ids, types, mask)
    np.testing.assert_allclose(
        out["hidden_states"],
        jnp.take_along_axis(reference["hidden_states"], POSITIONS[..., None], axis=1),
        atol=1e-5)
    # Without masked positions the model stays dense: every position is scored.
    full = BertForMaskedLM(cfg).apply({"params": params}, ids, types, mask)
    np.testing.assert_allclose(full["mlm_logits"], reference["mlm_logits"], atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("num_labels", [1, 3])
def test_classifier_reads_cls_from_a_sparse_final_layer(num_labels, rng):
    cfg = tiny_model_config(attention="talking_heads")
    ids, types, mask = random_batch(rng, pad_from=7)
    model = BertForSequenceClassification(cfg, num_labels)
    params = init_params(model, ids, types, mask)
    dense = model.apply({"params": params}, ids, types, mask)
    sparse = BertForSequenceClassification(cfg.replace(sparse_final_layer=True), num_labels).apply(
        {"params": params}, ids, types, mask)
    assert sparse.shape == (ids.shape[0], num_labels)
    np.testing.assert_allclose(sparse, dense, atol=1e-5)


def test_flop_count_drops_the_final_layer_rows_that_are_not_predicted():
    cfg = tiny_model_config(num_layers=3, key_size=12)
    dense, sparse = flop_count(cfg, 16), flop_count(cfg.replace(sparse_final_layer=True), 16)
    tokens, predictions = 64, 10
    d, n, k, v, f = 32, 4, 12, 8, 64
    per_layer = (2 * d * (2 * n * k + n * v) + 2 * n * v * d + 2 * 16 * (n * k + n * v)
                 + 4 * d * f)
    key_value = 2 * d * n * (k + v)
    head = dense.mlm_head_per_prediction * predictions
    assert dense.train_step(tokens, predictions) == 3 * (3 * per_layer * tokens + head)
    expected = 3 * (2 * per_layer * tokens + key_value * tokens
                    + (per_layer - key_value) * predictions + head)
    assert sparse.train_step(tokens, predictions) == pytest.approx(expected)
    # Every token predicted: nothing is skipped.
    assert sparse.train_step(tokens, tokens) == dense.train_step(tokens, tokens)
