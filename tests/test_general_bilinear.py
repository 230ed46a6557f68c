"""General bilinear attention (attention/general_bilinear.py, Mesh TF's
GeneralBilinearSelfAttention): against a re-implementation of the reference's equations
(values and every gradient, fp32, padded keys, the sparse final layer's query rows), as
multi-head attention with key and value size D and identity key and value maps,
parameter and FLOP counts by hand, its config checks and settings, and refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import init_params, tiny_model_config

import attention
from common.errors import ConfigError

WIDTH, HEADS = 32, 3  # 3 heads need not divide the width: every head is D wide


def config(**overrides):
    return tiny_model_config(**{"attention": "general_bilinear", "num_heads": HEADS,
                                **overrides})


def reference(xp, params, x, mask, queries_from=None):
    """logits[h, t, s] = (x_t W_q,h + b_q,h) . x_s / sqrt(D), softmax over s, then
    sum_s w[h, t, s] x_s through W_o (numpy or jax.numpy)."""
    queries_from = x if queries_from is None else queries_from
    q = xp.einsum("btd,dhe->bthe", queries_from, params["query"]["kernel"])
    q = q + params["query"]["bias"]
    logits = xp.einsum("bthe,bse->bhts", q, x) / np.sqrt(x.shape[-1])
    logits = logits + xp.where(mask, 0.0, -1e9)[:, None, None, :]
    w = xp.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    u = xp.einsum("bhts,bse->bthe", w, x)
    return xp.einsum("bthe,hed->btd", u, params["out"]["kernel"]) + params["out"]["bias"]


def run(cfg, params, x, mask, queries_from=None):
    return attention.get(cfg.attention)(cfg).apply({"params": params}, x, mask, True,
                                                   queries_from)


@pytest.mark.slow
@pytest.mark.parametrize("sparse", [False, True])
def test_the_layer_equals_the_reference_values_and_gradients(sparse, rng):
    cfg = config()
    x = jax.random.normal(rng, (2, 9, WIDTH))
    mask = jnp.ones((2, 9), bool).at[1, 5:].set(False)
    rows = x[:, 2:5] if sparse else None  # the sparse final layer's query rows
    params = init_params(attention.get("general_bilinear")(cfg), x, mask, True)
    assert set(params) == {"query", "out"}  # no key or value projection
    assert params["query"]["kernel"].shape == (WIDTH, HEADS, WIDTH)
    # BERT's init (stddev 0.02) leaves the softmax nearly uniform: spread it
    params = jax.tree.map(lambda p: p * 5, params)
    want = reference(np, jax.tree.map(np.asarray, params), np.asarray(x), np.asarray(mask),
                     None if rows is None else np.asarray(rows))
    np.testing.assert_allclose(run(cfg, params, x, mask, rows), want, rtol=1e-6, atol=1e-6)

    def loss(out):
        return jnp.sum(jnp.sin(out))

    got = jax.grad(lambda p, x: loss(run(cfg, p, x, mask, None if rows is None
                                         else x[:, 2:5])), argnums=(0, 1))(params, x)
    ref = jax.grad(lambda p, x: loss(reference(jnp, p, x, mask, None if rows is None
                                               else x[:, 2:5])), argnums=(0, 1))(params, x)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6), got, ref)


@pytest.mark.slow
def test_it_is_multi_head_with_key_and_value_size_d_and_identity_key_value_maps(rng):
    heads = 2
    gb = config(num_heads=heads)
    mh = tiny_model_config(num_heads=heads, key_size=WIDTH, value_size=WIDTH)
    x = jax.random.normal(rng, (2, 7, WIDTH))
    mask = jnp.ones((2, 7), bool).at[0, 4:].set(False)
    params = jax.tree.map(lambda p: p * 5,
                          init_params(attention.get("general_bilinear")(gb), x, mask, True))
    identity = {"kernel": jnp.broadcast_to(jnp.eye(WIDTH)[:, None, :], (WIDTH, heads, WIDTH)),
                "bias": jnp.zeros((heads, WIDTH))}
    mh_params = {**params, "key": identity, "value": identity}
    np.testing.assert_allclose(run(gb, params, x, mask), run(mh, mh_params, x, mask),
                               rtol=1e-6, atol=1e-6)


def test_parameters_and_flops_match_a_count_by_hand():
    from models.flops import (
        flop_count,
        key_value_flops_per_token,
        layer_flops_per_token,
        parameter_counts,
    )

    cfg, length = config(), 16
    mh = tiny_model_config()  # the same model with multi-head attention
    d, h = WIDTH, HEADS
    per_layer_gb = d * h * d + h * d + h * d * d + d  # W_q, b_q, W_o, b_o
    per_layer_mh = 4 * d * d + 4 * d
    assert parameter_counts(cfg)[0] - parameter_counts(mh)[0] == \
        cfg.num_layers * (per_layer_gb - per_layer_mh)
    # W_q and W_o (2 H D^2 each, x2 for multiply-adds), logits and weights x values
    # (2 n H D each), the feed-forward block
    assert layer_flops_per_token(cfg, length) == \
        2 * d * h * d + 2 * h * d * d + 2 * length * h * d * 2 + 4 * d * cfg.mlp_dim
    assert key_value_flops_per_token(cfg) == 0  # nothing runs at every key position
    sparse = cfg.replace(sparse_final_layer=True)
    assert flop_count(sparse, length).skipped_per_unpredicted_token == \
        layer_flops_per_token(sparse, length)


def test_memory_model_keeps_queries_and_head_outputs_only():
    from models.memory import layer_bytes

    cfg, tokens, length = config(dropout_rate=0.0), 10, 5
    a, d, h = 4, WIDTH, HEADS
    attention_bytes = (a * d * tokens + a * h * d * tokens  # input, queries
                       + tokens * length * a * h  # softmax output
                       + a * h * d * tokens)  # the output projection's input
    rest = 2 * a * d * tokens + (a * d + 2 * a * cfg.mlp_dim) * tokens
    assert layer_bytes(cfg, tokens, length) == attention_bytes + rest


def test_key_or_value_size_other_than_d_is_one_error():
    with pytest.raises(ConfigError, match=r"model.key_size=8: general_bilinear attention's "
                                          r"keys and values are the hidden states"):
        config(key_size=8)
    config(key_size=WIDTH)  # D is what it is anyway
    with pytest.raises(ConfigError, match=r"model.general_bilinear.dropout_noise='x'"):
        tiny_model_config(general_bilinear=attention.registry.variant(
            "general_bilinear").settings(dropout_noise="x"))


def test_the_config_args_and_the_resume_rules():
    from configs import model as model_configs
    from models import ModelConfig
    from training.resume import check_same_architecture

    cfg = ModelConfig.from_config(model_configs.get_config(
        "size=micro,attention=general_bilinear,heads=3,gb_dropout_noise=shared_queries").model)
    assert cfg.general_bilinear.dropout_noise == "shared_queries"
    assert cfg.head_key_size == cfg.head_value_size == cfg.hidden_size
    # the noise shape is how it is computed, not what it is: a checkpoint resumes across it
    saved = {"model": cfg.to_dict()}
    check_same_architecture(saved, cfg.replace(general_bilinear=type(cfg.general_bilinear)()),
                            "runs/x")


@pytest.mark.slow
def test_dropout_with_shared_queries_drops_one_key_for_every_query(rng):
    """Values are the hidden states and the output map the identity, so with one-hot
    positions as inputs and a zero query map the output rows are the dropped weights."""
    length = WIDTH
    cfg = config(num_heads=1, attention_dropout_rate=0.5,
                 general_bilinear=attention.registry.variant("general_bilinear").settings(
                     dropout_noise="shared_queries"))
    x = jnp.broadcast_to(jnp.eye(length), (2, length, WIDTH))
    mask = jnp.ones((2, length), bool)
    module = attention.get("general_bilinear")(cfg)
    params = init_params(module, x, mask, True)
    params = {"query": jax.tree.map(jnp.zeros_like, params["query"]),
              "out": {"kernel": jnp.eye(WIDTH)[None], "bias": jnp.zeros(WIDTH)}}
    out = np.asarray(module.apply({"params": params}, x, mask, False, rngs={"dropout": rng}))
    dropped = out == 0  # uniform weights 1/S, so a kept one is 2/S exactly
    assert 0.3 < dropped.mean() < 0.7
    np.testing.assert_allclose(out[~dropped], 2 / length, rtol=1e-6)
    np.testing.assert_array_equal(dropped, np.broadcast_to(dropped[:, :1], dropped.shape))


def test_export_is_refused_with_one_error(tmp_path):
    from models.hf_export import ExportError, save_pretrained

    with pytest.raises(ExportError, match=r"model.attention='general_bilinear' has no "
                                          r"PyTorch class"):
        save_pretrained({}, config(), None, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_sharded_run_equals_one_device():
    """(data=2, fsdp=2, tensor=2) of 8 fake devices: 2 steps give one device's losses and
    parameters, the query map split over fsdp (its input) and tensor (its heads)."""
    from helpers import one_device_mlm_run, run_mlm_steps, sharding_config
    from jax.sharding import PartitionSpec as P

    config = sharding_config("general_bilinear")
    config.model.sparse_final_layer = True
    single_state, single = one_device_mlm_run(config)
    sharded_state, sharded = run_mlm_steps(config, {"data": 2, "fsdp": 2, "tensor": 2},
                                           jax.devices())
    for a, b in zip(single, sharded, strict=True):
        for key in ("loss_sum", "grad_norm"):
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                 jax.device_get(single_state["params"]), jax.device_get(sharded_state["params"]))
    layer = sharded_state["params"]["bert"]["encoder"]["layer_0"]["attention"]
    assert layer["query"]["kernel"].sharding.spec == P("fsdp", "tensor", None)
    assert layer["query"]["kernel"].addressable_shards[0].data.shape == (16, 2, 32)


@pytest.mark.slow
@pytest.mark.parametrize("attention_name,exportable", [("general_bilinear", False),
                                                       ("talking_heads", True)])
def test_the_end_of_a_run_suggests_an_export_only_where_one_works(attention_name, exportable):
    from configs import pretrain
    from tasks.glue_tasks import TASKS
    from training.pretrain import end_of_run
    from training.results import FinalMetrics, FineTuningResults

    config = pretrain.get_config(f"size=micro,attention={attention_name}")
    lines = end_of_run("runs/x", FinalMetrics(10, 1.0), config, 0, 3.0, 10, True)
    assert ("export_hf.py" in lines) == exportable
    glue = FineTuningResults("runs/x@10", tasks={"sst2": None})
    line = TASKS["SST-2"].files_line("runs/g", glue, type("C", (), {"save_model": "best"}),
                              attention_name)
    assert ("export_hf.py" in line) == exportable
