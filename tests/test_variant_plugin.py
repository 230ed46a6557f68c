"""Issue 50's promise: an attention variant is a plug-in. A variant in a file of its own,
outside the repository and named by ATTENTION_PLUGINS, is registered, configured by its
name and short arg, counted (FLOPs, memory), pretrained and refused by the Hugging Face
export in one line, with no line changed anywhere else; a plug-in that cannot work is
one clear line too.

It runs in child processes: a registered variant stays registered for the process, and
the other tests in this worker must see the shipped variants only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import REPO, child_xla_flags

# A researcher's variant: multi-head attention whose logits are divided by a learned
# temperature per head, with a setting of its own (the temperature it starts from).
PLUGIN = '''
"""Multi-head attention with a learned temperature per head."""

from __future__ import annotations

import dataclasses

import flax.linen as nn

from attention.base import (
    Attention,
    apply_weights,
    dot_product_logits,
    dropout_weights,
    padding_bias,
    softmax_weights,
)
from attention.registry import register
from common.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ScaledLogitsConfig:
    init_temperature: float = 1.0  # every head's temperature at initialisation


@register("scaled_logits", settings=ScaledLogitsConfig,
          short_args={"temp": "init_temperature"})
class ScaledLogitsAttention(Attention):
    def attend(self, query, key, value, mask, deterministic, query_inputs, key_inputs):
        cfg = self.config
        temperature = self.param(
            "temperature", nn.initializers.constant(cfg.scaled_logits.init_temperature),
            (cfg.num_heads,))
        logits = dot_product_logits(query, key) / temperature[:, None, None]
        weights = dropout_weights(softmax_weights(logits + padding_bias(mask)),
                                  cfg.attention_dropout_rate, self.dropout_rng(deterministic))
        return apply_weights(weights, value)

    @classmethod
    def check_config(cls, config):
        temperature = config.scaled_logits.init_temperature
        if not temperature > 0:
            raise ConfigError(f"model.scaled_logits.init_temperature={temperature!r} "
                              f"must be positive")

    @classmethod
    def extra_flops_per_token(cls, config, seq_len):
        return config.num_heads * seq_len  # a division per logit

    @classmethod
    def saved_score_bytes(cls, config, element_bytes):
        # and the logits before the division, fp32 (the temperature's gradient reads them)
        return super().saved_score_bytes(config, element_bytes) + 4 * config.num_heads
'''

# What the child reports, as JSON on its last line: the registry, the config the args
# made, the counts against multi-head's, a pretraining step and the export's refusal.
CHILD = '''
import json, math, sys

import attention
from attention.registry import variant
from configs import pretrain
from configs.overrides import apply_overrides
from helpers import final_params, tiny_run_args
from models import ModelConfig
from models.flops import flop_count, parameter_counts
from models.memory import step_bytes
from training.pretrain import train_and_evaluate

corpus, cache, workdir = sys.argv[1:]
config = pretrain.get_config("size=micro,attention=scaled_logits,temp=2.0")
apply_overrides(config, tiny_run_args(corpus, cache, steps=1, log_every_steps=1,
                                      eval_every_steps=1, checkpoint_every_steps=1,
                                      **{"optimizer.warmup_steps": 0}))
cfg = ModelConfig.from_config(config.model)
multi_head = cfg.replace(attention="multi_head")
seq_len, preds = config.data.max_seq_length, config.data.max_predictions_per_seq
try:
    cfg.replace(attention_impl="fused")
    fused = None
except ValueError as e:
    fused = str(e)
final = train_and_evaluate(config, workdir)
_, params = final_params(workdir)
report = {
    "names": attention.names(),
    "shipped": variant("scaled_logits").shipped,
    "settings": [cfg.attention, cfg.scaled_logits.init_temperature],
    "fused": fused,
    "flops": [flop_count(c, seq_len).encoder_per_token for c in (cfg, multi_head)],
    "params": [sum(parameter_counts(c)) for c in (cfg, multi_head)],
    "memory": [step_bytes(c, 16, seq_len, preds, 1).total for c in (cfg, multi_head)],
    "shape": [cfg.num_layers, cfg.num_heads, cfg.sparse_final_layer, seq_len, preds],
    "train_loss": final["train_loss"],
    "temperature": params["bert"]["encoder"]["layer_0"]["attention"]["temperature"].tolist(),
}
print(json.dumps(report))
'''


def run_with_plugin(plugin: str, command: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, ATTENTION_PLUGINS=plugin,
               PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]),
               XLA_FLAGS=child_xla_flags())  # one CPU device: faster
    return subprocess.run([sys.executable, *command], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # pretrains a step in a child process
def test_a_variant_in_its_own_file_is_configured_counted_trained_and_not_exported(
        run_corpus, tmp_path):
    plugin = tmp_path / "scaled_logits.py"
    plugin.write_text(textwrap.dedent(PLUGIN))
    corpus, cache = run_corpus
    workdir = str(tmp_path / "run")

    child = run_with_plugin(str(plugin), ["-c", CHILD, corpus, cache, workdir])
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout.splitlines()[-1])
    assert report["names"] == ["general_bilinear", "multi_head", "scaled_logits",
                               "talking_heads"]
    assert report["shipped"] is False
    assert report["settings"] == ["scaled_logits", 2.0]  # attention=NAME and its short arg
    assert report["fused"] == ("model.attention_impl='fused' exists for multi_head only, "
                               "not 'scaled_logits': heads are mixed between logits and "
                               "softmax")
    layers, heads, sparse_final_layer, seq_len, predictions = report["shape"]
    assert (layers, sparse_final_layer) == (1, True)  # tiny_run_args' one layer
    flops, multi_head_flops = report["flops"]
    assert flops - multi_head_flops == layers * heads * seq_len  # its extra_flops_per_token
    params, multi_head_params = report["params"]
    assert params - multi_head_params == layers * heads  # a temperature per head and layer
    memory, multi_head_memory = report["memory"]
    # Its saved logits, 4 bytes per head, query and key (the one layer, sparse, has a
    # query per predicted token of the 16 sequences), and the temperatures' AdamW state
    # and gradient (16 bytes a parameter).
    saved = 4 * heads * (16 * predictions) * seq_len
    assert memory - multi_head_memory == saved + 16 * layers * heads
    assert report["train_loss"] > 0
    assert report["temperature"] != [2.0] * heads  # trained: the step moved them

    export = run_with_plugin(str(plugin), ["scripts/export_hf.py", "--workdir", workdir,
                                           "--out", str(tmp_path / "hf")])
    assert export.returncode == 1, export.stderr
    assert export.stderr.strip() == (
        "error: model.attention='scaled_logits' has no PyTorch class in "
        "modeling_bert_ablation.py (it implements multi_head, talking_heads); it cannot "
        "be exported"), export.stderr
    assert not os.path.exists(tmp_path / "hf")


@pytest.mark.parametrize("source,error", [
    (None, "ATTENTION_PLUGINS: '{path}' is not a file"),
    ("x = 1\n", "ATTENTION_PLUGINS: '{path}' registers no attention variant (decorate its "
                "module class with @register(NAME))"),
    # models/ builds ModelConfig from the registry: it would miss this file's variant
    ("from models.config import ModelConfig\n",
     "attention: {path} asks for the variants while they load (does it import models/?); "
     "a variant imports only attention and common at load time"),
], ids=["missing", "registers_nothing", "imports_models"])
def test_a_plugin_that_cannot_work_is_one_clear_line(tmp_path, source, error):
    plugin = tmp_path / "broken.py"
    if source is not None:
        plugin.write_text(source)
    child = run_with_plugin(str(plugin), ["-c", "import attention; attention.names()"])
    assert child.returncode == 1
    assert child.stderr.splitlines()[-1] == (
        "common.errors.ConfigError: " + error.format(path=plugin))
