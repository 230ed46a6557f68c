"""Parity with Hugging Face transformers' BERT (PyTorch) through our importer."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from models import BertForMaskedLM
from models.hf_import import CheckpointError, convert_bert, from_pretrained, load_state_dict

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HF_CONFIG = dict(
    vocab_size=101, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=96, max_position_embeddings=40, type_vocab_size=2,
    hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
)


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    # BertForPreTraining: the layout of Google's checkpoints (pooler and MLM head).
    model = transformers.BertForPreTraining(transformers.BertConfig(**HF_CONFIG)).eval()
    # Random everything (LayerNorm scales and biases too), so a swapped or
    # untransposed tensor cannot hide behind an init of ones or zeros.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if p.ndim == 1 and p.shape[0] == 48 else 0))
    return model


def hf_outputs(model, ids, types, mask):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                    attention_mask=torch.tensor(mask), output_hidden_states=True)
        pooled = model.bert.pooler(out.hidden_states[-1])
    return out.hidden_states[-1].numpy(), out.prediction_logits.numpy(), pooled.numpy()


def ours(config, params, ids, types, mask):
    out = BertForMaskedLM(config).apply(
        {"params": params}, jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask))
    return np.asarray(out["hidden_states"]), np.asarray(out["mlm_logits"]), np.asarray(
        out["pooled"])


def batch():
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 101, size=(3, 17))
    types = (np.arange(17) >= 9).astype(np.int64)[None].repeat(3, 0)
    mask = np.ones((3, 17), np.int64)
    mask[1, 12:] = 0
    mask[2, 5:] = 0
    return ids, types, mask


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["safetensors", "pytorch_bin", "flax_msgpack"])
def test_hidden_states_and_mlm_logits_equal_hugging_face(hf_model, tmp_path, fmt):
    if fmt == "safetensors":
        hf_model.save_pretrained(tmp_path)  # config.json + model.safetensors
    else:
        (tmp_path / "config.json").write_text(json.dumps(HF_CONFIG))
        state = {k: v.numpy() for k, v in hf_model.state_dict().items()}
        if fmt == "pytorch_bin":
            torch.save(hf_model.state_dict(), tmp_path / "pytorch_model.bin")
        else:
            write_hf_flax_msgpack(state, tmp_path / "flax_model.msgpack")
    config, params = from_pretrained(str(tmp_path))
    ids, types, mask = batch()
    ref_hidden, ref_logits, ref_pooled = hf_outputs(hf_model, ids, types, mask)
    hidden, logits, pooled = ours(config, params, ids, types, mask)
    real = mask.astype(bool)
    assert np.abs(hidden[real] - ref_hidden[real]).max() <= 1e-4
    assert np.abs(logits[real] - ref_logits[real]).max() <= 1e-4
    assert np.abs(pooled - ref_pooled).max() <= 1e-4


def write_hf_flax_msgpack(state: dict, path) -> None:
    """HF's Flax layout: nested dicts, kernels [in, out], 'embedding', LayerNorm 'scale'."""
    from flax import serialization

    tree: dict = {}
    for name, value in state.items():
        if name.endswith("decoder.weight") or name.endswith("decoder.bias"):
            continue  # tied to the word embeddings / the same bias in HF Flax
        parts = name.split(".")
        leaf = parts[-1]
        if leaf == "weight":
            if "embeddings" in parts[-2]:
                leaf = "embedding"
            elif "LayerNorm" in parts[-2]:
                leaf = "scale"
            else:
                leaf, value = "kernel", value.T
        node = tree
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[leaf] = value
    path.write_bytes(serialization.msgpack_serialize(tree))


@pytest.mark.slow
def test_missing_parameter_is_named(hf_model):
    from models.hf_import import model_config_from_hf

    state = {k: v.numpy() for k, v in hf_model.state_dict().items()}
    del state["bert.encoder.layer.1.attention.self.key.weight"]
    with pytest.raises(CheckpointError, match=r"encoder\.layer\.1\.attention\.self\.key\.weight"):
        convert_bert(state, model_config_from_hf(HF_CONFIG))


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no weights file"):
        load_state_dict(str(tmp_path))
    with pytest.raises(CheckpointError, match="does not exist"):
        load_state_dict(str(tmp_path / "nothing.safetensors"))


class _RunsCode:
    """Unpickling this runs a shell command: what a malicious pytorch_model.bin holds."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def foreign_weight_files(directory):
    """{name: (path, what the error must say)}: a pickle with code in it, a zip that is
    no torch archive, a safetensors file whose header lies about its sizes."""
    import zipfile

    from safetensors.numpy import save_file

    directory.mkdir()
    evil = directory / "evil" / "pytorch_model.bin"
    evil.parent.mkdir()
    torch.save({"embeddings.word_embeddings.weight": torch.zeros(2, 2),
                "x": _RunsCode(directory / "pwned")}, evil)
    (evil.parent / "config.json").write_text(json.dumps(HF_CONFIG))
    not_torch = directory / "zip.bin"
    with zipfile.ZipFile(not_torch, "w") as f:
        f.writestr("hello.txt", "not a torch archive")
    lies = directory / "lies.safetensors"
    save_file({"a": np.zeros((4, 4), np.float32)}, str(lies))
    raw = lies.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = raw[8:8 + size].decode().replace("[4,4]", "[400,400]").replace(
        "[0,64]", "[0,640000]")
    lies.write_bytes(len(header.encode()).to_bytes(8, "little") + header.encode()
                     + raw[8 + size:])
    return {"code": (evil, "not a plain weights file .*never unpickles"),
            "zip": (not_torch, "not a readable PyTorch weights file"),
            "lies": (lies, "not a readable safetensors weights file")}


def test_foreign_and_malicious_weight_files_are_refused_naming_them(tmp_path):
    for name, (path, message) in foreign_weight_files(tmp_path / "files").items():
        with pytest.raises(CheckpointError, match=f"{path}: {message}") as info:
            load_state_dict(str(path))
        assert "weights_only" not in str(info.value), name  # never advise turning it off
    assert not (tmp_path / "files" / "pwned").exists()  # the pickled command never ran


@pytest.mark.slow
def test_eval_glue_with_a_malicious_checkpoint_is_one_error_line(tmp_path):
    import subprocess
    import sys

    from helpers import REPO, child_xla_flags

    path, _ = foreign_weight_files(tmp_path / "files")["code"]
    done = subprocess.run(
        [sys.executable, "eval_glue.py", "--config", "configs/glue.py:task=rte",
         f"--config.init_from_hf={path.parent}", f"--workdir={tmp_path / 'out'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "XLA_FLAGS": child_xla_flags()})
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {path}: not a plain weights file"), done.stderr[-2000:]
    assert "weights_only" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "files" / "pwned").exists()


def test_a_bad_config_json_is_one_error_naming_it_and_the_field(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=f"{tmp_path / 'config.json'}: not a readable "
                                              f"JSON config"):
        from_pretrained(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps(
        {k: v for k, v in HF_CONFIG.items() if k != "vocab_size"}))
    with pytest.raises(CheckpointError, match=f"{tmp_path / 'config.json'}: has no "
                                              f"'vocab_size'"):
        from_pretrained(str(tmp_path))
