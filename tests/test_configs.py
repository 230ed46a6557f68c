"""Configs: parameter counts against BERT and the papers, validation, arg parsing."""

from __future__ import annotations

import pytest

from common.errors import ConfigError
from configs import grids
from configs import model as model_configs
from models import ModelConfig
from models.flops import parameter_counts


def model_config(arg: str) -> ModelConfig:
    return ModelConfig.from_config(model_configs.get_config(arg).model)


def test_bert_base_has_exactly_the_published_parameter_count():
    encoder, head = parameter_counts(model_config("size=base"))
    assert encoder == 109_482_240
    # transform D*D + D, LayerNorm 2D, output bias over the vocabulary (decoder tied).
    assert head == 768 * 768 + 768 + 2 * 768 + 30522


PAPER_COUNTS_M = {  # the low-rank paper's reported counts (millions), in configs/grids.py
    row.name: row.reported["params_m"]
    for rows in grids.GRIDS.values() for row in rows if "params_m" in row.reported
}


@pytest.mark.parametrize("row", sorted(PAPER_COUNTS_M))
def test_low_rank_rows_match_the_papers_parameter_counts(row):
    encoder, head = parameter_counts(model_config(f"row={row}"))
    # The paper rounds to millions and counts its heads in some rows: within 1%.
    assert encoder / 1e6 == pytest.approx(PAPER_COUNTS_M[row], rel=0.01)


def test_table_2a_counts_match_design_to_a_tenth_of_a_million():
    got = [parameter_counts(model_config(f"row=lowrank_2a_h{h}"))[0] / 1e6 for h in (8, 12, 16, 32)]
    assert got == pytest.approx([167.4, 192.6, 217.8, 318.6], abs=0.05)


@pytest.mark.parametrize("hk,h,hv", [(12, 12, 12), (6, 12, 24), (24, 12, 4)])
def test_talking_heads_adds_exactly_the_two_mixing_matrices_per_layer(hk, h, hv):
    th = model_config(f"size=mini,attention=talking_heads,th_logit_heads={hk},"
                      f"th_value_heads={hv},heads={h},key_size=64,value_size=64")
    mh_hk = model_config(f"size=mini,heads={hk},key_size=64,value_size=64")
    # q/k sized by h_k, v/o by h_v: compare against projections counted directly.
    d, k, v, layers = 256, 64, 64, 4
    qkvo = lambda nq, nv: 2 * (d * nq * k + nq * k) + (d * nv * v + nv * v) + nv * v * d + d  # noqa: E731
    expected_delta = layers * (qkvo(hk, hv) - qkvo(hk, hk) + hk * h + h * hv)
    assert parameter_counts(th)[0] - parameter_counts(mh_hk)[0] == expected_delta


def test_every_grid_row_builds_a_valid_config():
    for name in grids.ROWS:
        cfg = model_config(f"row={name}")
        assert cfg.num_layers > 0


def test_arg_parsing_types_and_overrides():
    cfg = model_config("size=base,attention=talking_heads,heads=24,key_size=128,dropout=0")
    assert (cfg.num_heads, cfg.head_key_size, cfg.head_value_size) == (24, 128, 32)
    assert cfg.attention == "talking_heads" and cfg.dropout_rate == 0
    cfg = model_config("row=lowrank_2b_dp256")
    assert (cfg.hidden_size, cfg.num_heads, cfg.head_key_size, cfg.head_value_size) == (
        512, 8, 256, 256)


BAD_CONFIGS = [
    ("size=enormous", "model.size='enormous' is unknown"),
    ("size=base,heads=5", "model.num_heads=5 does not divide model.hidden_size=768"),
    ("size=base,attention=linear", "model.attention='linear' is unknown"),
    ("size=base,key_size=0", "model.key_size=0 must be a positive integer"),
    ("size=base,value_size=-4", "model.value_size=-4 must be a positive integer"),
    ("size=base,layers=0", "model.num_layers=0 must be a positive integer"),
    ("size=base,norm=middle", "model.norm_placement='middle' is unknown"),
    ("size=base,impl=fused", "set model.attention_dropout_rate=0"),
    ("size=base,attention=talking_heads,impl=fused,attention_dropout=0",
     "model.attention_impl='fused' exists for multi_head only, not 'talking_heads': heads "
     "are mixed between logits and softmax"),
    ("size=base,dropout=1.5", "model.dropout_rate=1.5 must be in [0, 1)"),
    ("size=base,attention=talking_heads,th_init=identity,th_logit_heads=6",
     "init='identity' needs num_logit_heads == num_heads"),
    ("size=base,attention=talking_heads,th_projections=weights,th_logit_heads=6",
     "no logits projection"),
    ("size=base,attention=talking_heads,th_mask=sideways", "mask_placement='sideways'"),
    ("size=base,bogus=1", "unknown config arg(s) ['bogus']"),
    ("row=nope", "row='nope' is unknown"),
]


@pytest.mark.parametrize("arg,message", BAD_CONFIGS)
def test_bad_configs_fail_with_one_clear_line(arg, message):
    with pytest.raises(ValueError) as info:
        model_config(arg)
    text = str(info.value)
    assert message in text and "\n" not in text


def test_heads_need_not_divide_width_when_both_sizes_are_set():
    cfg = model_config("size=base,heads=5,key_size=128,value_size=128")
    assert cfg.num_heads == 5


def test_unknown_model_field_is_rejected():
    with pytest.raises(ConfigError, match="unknown field"):
        ModelConfig.from_config({"hidden_size": 64, "colour": "blue"})


def test_the_dense_task_rows_hold_the_width_and_take_the_key_size_to_2():
    shapes = {}
    for row in grids.GRIDS["synthetic_mode"]:
        config = ModelConfig.from_config(model_configs.get_config(f"row={row.name}").model)
        assert (config.hidden_size, config.num_layers, config.max_position_embeddings) == (
            64, 2, 40)
        shapes[row.name] = (config.num_heads, config.head_key_size, config.head_value_size)
    assert shapes == {"mode_mh_h2": (2, 32, 32), "mode_mh_h8": (8, 8, 8),
                      "mode_mh_h32": (32, 2, 2), "mode_mh_k32_h32": (32, 32, 2),
                      "mode_th_h32": (32, 2, 2)}
    assert {name for pair in grids.PAIRS["synthetic_mode"] for name in pair} == set(shapes)


def test_synthetic_rows_take_the_key_size_from_32_down_to_2():
    key_sizes = {}
    for row in grids.GRIDS["synthetic_find"]:
        config = ModelConfig.from_config(model_configs.get_config(f"row={row.name}").model)
        key_sizes[row.name] = (config.num_heads, config.head_key_size, config.head_value_size)
    assert key_sizes["syn_mh_h2"] == (2, 32, 32) and key_sizes["syn_mh_h32"] == (32, 2, 2)
    assert key_sizes["syn_mh_k32_h32"] == (32, 32, 2)
    assert key_sizes["syn_fixed32_h8"] == (8, 32, 32)
    assert key_sizes["syn_th_h32"] == (32, 2, 2)
    assert {ModelConfig.from_config(model_configs.get_config(f"row={r.name}").model)
            .initializer_range for r in grids.GRIDS["synthetic_find"]} == {0.1}


def test_declared_pairs_name_rows_of_their_grid():
    for grid, pairs in grids.PAIRS.items():
        names = {row.name for row in grids.GRIDS[grid]}
        assert pairs and all(a in names and b in names and a != b for a, b in pairs), grid


@pytest.mark.parametrize("rows, message", [
    ([grids.Row("b", {}, pretrained_by="a"), grids.Row("a", {})],
     "row b: pretrained_by='a' must name an earlier row"),
    ([grids.Row("a", {"heads": 2}), grids.Row("b", {}, pretrained_by="a")],
     "row b: its overrides must equal those of a"),
    ([grids.Row("a", {}), grids.Row("b", {}, pretrained_by="a"),
      grids.Row("c", {}, pretrained_by="b")], "row c: pretrained_by='b' must name an earlier"),
    ([grids.Row("a", {}, glue={"learning_rate": 1e-4})], "row a: unknown glue arg(s)"),
])
def test_rows_that_share_a_pretraining_are_checked(rows, message):
    from analysis import sweep_grids

    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sweep_grids.check_rows(rows)


@pytest.mark.parametrize("module, arg", [("glue", "seeds=x"), ("squad", "max_answer=x")])
def test_a_fine_tuning_arg_of_the_wrong_type_is_one_value_error(module, arg):
    """It was ml_collections' TypeError, a traceback out of sweep.py --glue_args."""
    import importlib

    get_config = importlib.import_module(f"configs.{module}").get_config
    with pytest.raises(ValueError, match=rf"^{arg.split('=')[0]}='x': \w+ must be of type int"):
        get_config(arg)


def test_the_default_key_and_value_sizes_follow_the_heads_that_use_them():
    """Talking heads with h_k != h (or h_v != h): as the reference, K = D / h_k and
    V = D / h_v when unset, not D / h; and a width h_k does not divide is one error
    naming the field to set."""
    from helpers import tiny_model_config


    cfg = tiny_model_config(hidden_size=48, num_heads=4, attention="talking_heads",
                            talking_heads={"num_logit_heads": 6, "num_value_heads": 2})
    assert (cfg.head_key_size, cfg.head_value_size) == (8, 24)
    assert tiny_model_config(hidden_size=48, num_heads=4).head_key_size == 12  # multi-head
    with pytest.raises(ConfigError, match=r"num_logit_heads=5 does not divide "
                                          r"model.hidden_size=48; set model.key_size"):
        tiny_model_config(hidden_size=48, num_heads=4, attention="talking_heads",
                          talking_heads={"num_logit_heads": 5})
    explicit = tiny_model_config(hidden_size=48, num_heads=4, key_size=4,
                                 attention="talking_heads", talking_heads={"num_logit_heads": 5})
    assert explicit.head_key_size == 4
