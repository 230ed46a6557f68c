"""The model line at pretraining's start names the attention's settings (issue 51):
built from a config, nothing compiled."""

from __future__ import annotations

import types

import jax
import numpy as np

from attention.talking_heads import TalkingHeadsConfig
from models.config import ModelConfig, describe_attention
from training import metrics, pretrain


def test_the_attention_is_described_by_its_resolved_heads_and_its_own_settings():
    assert describe_attention(ModelConfig(attention="multi_head")) == (
        "multi_head (heads 12, key size 64, value size 64, h_k 12, h_v 12)")
    th = ModelConfig(attention="talking_heads", hidden_size=256, num_heads=4, mlp_dim=1024,
                     talking_heads=TalkingHeadsConfig(num_logit_heads=8, num_value_heads=2,
                                                      dynamic_projections="x2l+m2w",
                                                      impl="chunked"))
    assert describe_attention(th) == (
        "talking_heads (heads 4, key size 32, value size 128, h_k 8, h_v 2, num logit heads "
        "8, num value heads 2, projections both, mask placement after, init fan_in, dropout "
        "placement after_mixing, groups 1, dynamic projections x2l+m2w, dynamic init scale "
        "0.01)")  # no impl: execution
    assert "dynamic projections off" in describe_attention(ModelConfig(attention="talking_heads"))


def test_pretrainings_model_line_names_the_settings(tmp_path, monkeypatch):
    lines = []
    monkeypatch.setattr(metrics, "console", lines.append)
    cfg = ModelConfig(attention="talking_heads")
    params = {"w": jax.ShapeDtypeStruct((5_570_000,), np.float32)}
    run = types.SimpleNamespace(workdir=str(tmp_path), model_cfg=cfg,
                                compiled=types.SimpleNamespace(abstract_state={"params": params}))
    pretrain.announce(run, types.SimpleNamespace(vocab_size=8192, train=range(10)))
    assert lines == ["model talking_heads (heads 12, key size 64, value size 64, h_k 12, "
                     "h_v 12, projections both, mask placement after, init fan_in, dropout "
                     "placement after_mixing, groups 1, dynamic projections off, dynamic init "
                     "scale 0.01): 5.57M parameters, "
                     "vocabulary 8192, 10 train sequences"]
