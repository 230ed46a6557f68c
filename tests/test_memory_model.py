"""models/memory.py: the analytic memory of a training step, against Korthikanti et al.
2022's published count of a transformer layer's saved activations (s b h (34 + 5 a s /
h) bytes at 2-byte activations with dropout) and BERT-base's published parameter count."""

from __future__ import annotations

import pytest

from configs import pretrain
from models import memory
from training.pretrain import model_config_for


def base_config(**model):
    config = pretrain.get_config("size=base,dtype=bfloat16")
    config.model.update(model)
    return model_config_for(config, 30522)


def korthikanti(s: int, b: int, h: int, a: int) -> float:
    return s * b * h * (34 + 5 * a * s / h)


@pytest.mark.parametrize("seq_len, heads", [(128, 12), (512, 12), (128, 48)])
def test_a_bert_layer_saves_what_korthikanti_counts(seq_len, heads):
    cfg = base_config(num_heads=heads)
    b = 32
    assert memory.layer_bytes(cfg, b * seq_len, seq_len) == korthikanti(seq_len, b, 768, heads)


def test_without_dropout_its_masks_and_dropped_copies_are_not_kept():
    cfg = base_config(dropout_rate=0.0, attention_dropout_rate=0.0)
    s, b, h, a = 128, 32, 768, 12
    # 34 - 2 one-byte hidden masks; scores: only the 2-byte softmax output (2 of 5)
    assert memory.layer_bytes(cfg, b * s, s) == s * b * h * 32 + 2 * a * s * s * b


def test_talking_heads_also_keeps_the_logits_before_its_logit_mixing():
    s, b = 128, 32
    multi_head = base_config()
    talking = base_config(attention="talking_heads")
    # + the (B, h, T, T) logits P_l's gradient reads, 2 bytes each
    extra = memory.layer_bytes(talking, b * s, s) - memory.layer_bytes(multi_head, b * s, s)
    assert extra == 2 * 12 * s * s * b


def test_a_sparse_final_layer_keeps_less_than_a_dense_one():
    dense = memory.activation_bytes(base_config(sparse_final_layer=False), 32, 128, 20)
    sparse = memory.activation_bytes(base_config(sparse_final_layer=True), 32, 128, 20)
    one_layer = memory.layer_bytes(base_config(), 32 * 128, 128)
    assert dense.layers == 12 * one_layer
    assert 11 * one_layer < sparse.layers < 11.5 * one_layer


def test_the_state_is_adamw_in_fp32_over_berts_parameters():
    """BERT-base: 109,482,240 parameters (Devlin et al.; pooler included) plus the MLM
    head's transform, layer norm and output bias (768^2 + 768 + 2 x 768 + 30522)."""
    cfg = base_config()
    step = memory.step_bytes(cfg, 32, 128, 20, parameter_shards=8)
    parameters = 109_482_240 + 768 * 768 + 768 + 2 * 768 + 30522
    assert step.state == 12 * parameters / 8 and step.gradients == 4 * parameters / 8
    head = 4 * 2 * 768 * 32 * 20 + 8 * 32 * 20 * 30522  # bf16 transform, fp32 logits + grad
    assert step.activations.mlm_head == head


def test_scanned_layers_add_one_fp32_copy_of_the_layers():
    """BERT-base's 12 layers hold 12 x 7,087,872 parameters (Devlin et al.'s 109,482,240
    less embeddings 23,837,184 and pooler 590,592): a scanned step keeps one more fp32
    copy of them (the scan's slice of the stack or its stacked gradient)."""
    unrolled = base_config()
    scanned = unrolled.replace(scan_layers=True)
    layers = 109_482_240 - (30522 + 512 + 2 + 2) * 768 - 768 * 769
    assert layers == 12 * 7_087_872
    assert memory.step_bytes(unrolled, 32, 128, 20, parameter_shards=8).layer_stack == 0
    step = memory.step_bytes(scanned, 32, 128, 20, parameter_shards=8)
    assert step.layer_stack == 4 * layers / 8
    assert step.total - step.layer_stack == memory.step_bytes(unrolled, 32, 128, 20, 8).total
