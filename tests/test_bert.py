"""The BERT model around the attention (models/bert.py, models/layers.py): the MLM head,
parameters' logical axes, rematerialisation, bfloat16 compute. (Attention variants:
test_attention.py; the last layer computed sparsely: test_sparse_final_layer.py.)"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import init_params, random_batch, tiny_model_config

from models import BertForMaskedLM

pytestmark = pytest.mark.slow  # every test compiles a model


def test_sparse_mlm_head_equals_dense_head_at_those_positions(rng):
    cfg = tiny_model_config(attention="talking_heads")
    model = BertForMaskedLM(cfg)
    ids, types, mask = random_batch(rng)
    params = init_params(model, ids, types, mask)
    positions = jnp.array([[0, 3, 3], [1, 2, 11], [5, 6, 7]])
    dense = model.apply({"params": params}, ids, types, mask)["mlm_logits"]
    sparse = model.apply({"params": params}, ids, types, mask, positions)["mlm_logits"]
    expected = jnp.take_along_axis(dense, positions[..., None], axis=1)
    np.testing.assert_allclose(sparse, expected, atol=1e-5)


def test_mlm_head_is_tied_to_word_embeddings(rng):
    cfg = tiny_model_config()
    model = BertForMaskedLM(cfg)
    ids, types, mask = random_batch(rng)
    params = init_params(model, ids, types, mask)
    flat = jax.tree_util.tree_leaves_with_path(params)
    vocab_sized = [jax.tree_util.keystr(p) for p, v in flat if v.shape[0] == cfg.vocab_size]
    assert vocab_sized == ["['bert']['embeddings']['word']['embedding']",
                           "['mlm_head']['output_bias']"]


def test_parameters_carry_logical_axes(rng):
    cfg = tiny_model_config(attention="talking_heads")
    ids, types, mask = random_batch(rng)
    boxed = BertForMaskedLM(cfg).init(jax.random.key(0), ids, types, mask)["params"]
    specs = nn.get_partition_spec(boxed)
    layer = specs["bert"]["encoder"]["layer_0"]
    assert tuple(layer["attention"]["query"]["kernel"]) == ("embed", "heads", "kv")
    assert tuple(layer["attention"]["out"]["kernel"]) == ("heads", "kv", "embed")
    assert tuple(layer["mlp"]["intermediate"]["kernel"]) == ("embed", "mlp")
    assert tuple(specs["bert"]["embeddings"]["word"]["embedding"]) == ("vocab", "embed")
    unannotated = [
        jax.tree_util.keystr(p) for p, v in jax.tree_util.tree_leaves_with_path(
            boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned))
        if not isinstance(v, nn.Partitioned)
    ]
    assert unannotated == []


@pytest.mark.parametrize("remat", ["full", "dots"])
def test_rematerialisation_gives_the_same_gradients(remat, rng):
    cfg = tiny_model_config(attention="talking_heads")
    ids, types, mask = random_batch(rng, pad_from=9)
    params = init_params(BertForMaskedLM(cfg), ids, types, mask)

    def grads(c):
        def loss(p):
            out = BertForMaskedLM(c).apply({"params": p}, ids, types, mask)
            return jnp.mean(jax.nn.logsumexp(out["mlm_logits"], -1))

        return jax.jit(jax.grad(loss))(params)

    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                 grads(cfg.replace(remat=remat)), grads(cfg))


@pytest.mark.parametrize("attention", ["multi_head", "talking_heads"])
def test_bfloat16_compute_keeps_fp32_params_softmax_and_logits(attention, rng):
    cfg = tiny_model_config(attention=attention, dtype="bfloat16")
    model = BertForMaskedLM(cfg)
    ids, types, mask = random_batch(rng, pad_from=9)
    params = init_params(model, ids, types, mask)
    assert {p.dtype for p in jax.tree.leaves(params)} == {jnp.dtype("float32")}
    out = model.apply({"params": params}, ids, types, mask)
    assert out["hidden_states"].dtype == jnp.bfloat16
    assert out["mlm_logits"].dtype == jnp.float32
    reference = BertForMaskedLM(cfg.replace(dtype="float32")).apply(
        {"params": params}, ids, types, mask)
    # bf16 has 8 bits of mantissa: agreement to a few percent of the logit scale.
    scale = float(jnp.abs(reference["mlm_logits"]).max())
    assert float(jnp.abs(out["mlm_logits"] - reference["mlm_logits"]).max()) < 0.05 * scale
