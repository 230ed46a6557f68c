"""Export to Hugging Face transformers (models/hf_export.py, scripts/export_hf.py) and
fill-mask (scripts/fill_mask.py), checked against transformers' PyTorch models: every
attention variant's export computes our logits to 1e-4, imports back to the same
parameters, and fill-mask agrees with pipeline("fill-mask") on the export."""

from __future__ import annotations

import dataclasses
import json
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ATTENTION_VARIANTS, init_params, run_script, tiny_model_config

from input_pipeline import train_tokenizer
from models import BertForMaskedLM, BertForSequenceClassification, BertModel, layout
from models import hf_export as export_lib
from models.hf_export import MIXING, full_mixing
from models.hf_import import convert_bert, load_state_dict, model_config_from_hf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SENTENCES = ["the cat sat on the mat .", "a dog ran in the park .", "the old man is happy ."]
# Every attention path an export must express (the fused path computes multi-head's
# numbers, so it is multi-head to transformers); pre-LN on top.
VARIANTS = {name: over for name, over in ATTENTION_VARIANTS.items()
            # the fused path is multi-head's numbers; grouped dynamic maps (below) cover
            # the ungrouped ones' export too
            if name not in ("multi_head_fused", "talking_heads_chunked", "talking_heads_dynamic")
            and over.get("attention", "multi_head") in export_lib.EXPORTABLE_ATTENTION}
VARIANTS["talking_heads_mask_before"] = {"attention": "talking_heads",
                                         "talking_heads": {"mask_placement": "before"}}
VARIANTS["talking_heads_grouped"] = {"attention": "talking_heads", "talking_heads": {"groups": 2}}
VARIANTS["talking_heads_dynamic_grouped"] = {
    "attention": "talking_heads", "talking_heads": {
        "groups": 2, "dynamic_projections": "x2l+m2l+x2w+m2w", "dynamic_init_scale": 1.0}}
VARIANTS["pre_ln"] = {"norm_placement": "pre"}
VARIANTS["pre_ln_talking_heads"] = {"norm_placement": "pre", "attention": "talking_heads"}
# Scanned layers (stacked parameters) go out as transformers' layer.i like unrolled ones.
VARIANTS["scanned"] = {"scan_layers": True}
VARIANTS["scanned_talking_heads_hk_hv"] = {**VARIANTS["talking_heads_hk_hv"], "scan_layers": True}


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(SENTENCES * 4, 97)


def batch(vocab: int):
    """Ids, token types (a second segment) and a padding mask with two padded rows."""
    ids = np.asarray(jax.random.randint(jax.random.key(1), (3, 12), 5, vocab))
    types = np.zeros_like(ids)
    types[:, 6:] = 1
    mask = np.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 4:] = 0
    return ids, types, mask


def perturbed(params, scale: float = 0.2):
    """Every parameter moved off its init (LayerNorm scales off 1, biases off 0, mixing off
    the identity), so a transposed or misnamed tensor cannot hide behind its init."""
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(7), len(leaves))
    return jax.tree.unflatten(tree, [x + scale * jax.random.normal(k, x.shape)
                                     for x, k in zip(leaves, keys, strict=True)])


def load(auto_class, directory, config):
    """transformers' model from the export: a plain row without our code."""
    plain = export_lib.is_plain_bert(config)
    model = auto_class.from_pretrained(directory, trust_remote_code=not plain).eval()
    assert (type(model).__module__.startswith("transformers.models.bert")) == plain
    return model


def torch_outputs(model, ids, types, mask):
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                     attention_mask=torch.tensor(mask))


def flat(tree):
    return flax.traverse_util.flatten_dict(tree, sep="/")


def assert_round_trip(directory, params, config):
    """import(export(params)) is params, leaf for leaf and bit for bit, with the same
    architecture."""
    from models.config import EXECUTION_FIELDS
    from training.resume import flatten

    def architecture(c):
        return {k: v for k, v in flatten(c.to_dict()).items()
                if k not in (*EXECUTION_FIELDS, "scan_layers")}  # transformers has one layout

    params = layout.to_layout(jax.device_get(params), scanned=False)  # as convert_bert reads

    if config.attention == "talking_heads" and config.talking_heads.groups > 1:
        # Grouped blocks go out as their block-diagonal matrices (the same function) and
        # come back as full mixing.
        config = config.replace(talking_heads=dataclasses.replace(config.talking_heads,
                                                                  groups=1))
        params = {key: full_mixing(key.split("/")[-1], value)
                  if key.split("/")[-1] in MIXING else value
                  for key, value in flat(jax.device_get(params)).items()}
        params = flax.traverse_util.unflatten_dict(params, sep="/")
    imported_config = model_config_from_hf(json.loads((directory / "config.json").read_text()))
    assert architecture(imported_config) == architecture(config)
    back = convert_bert(load_state_dict(str(directory)), imported_config)
    want, got = flat(jax.device_get(params)), flat(back)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], np.asarray(want[name]), err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_masked_lm_export_computes_our_logits_in_transformers(variant, tokenizer, tmp_path):
    vocab = tokenizer.get_vocab_size()
    config = tiny_model_config(vocab_size=vocab, **VARIANTS[variant])
    ids, types, mask = batch(vocab)
    params = perturbed(init_params(BertForMaskedLM(config), jnp.asarray(ids)))
    ours = BertForMaskedLM(config).apply({"params": params}, ids, types, mask)
    out = tmp_path / "export"
    export_lib.save_pretrained(params, config, tokenizer, out)
    assert (out / export_lib.MODELING_FILE).exists() == (not export_lib.is_plain_bert(config))

    real = mask.astype(bool)
    theirs = torch_outputs(load(transformers.AutoModelForMaskedLM, out, config), ids, types, mask)
    assert np.abs(np.asarray(ours["mlm_logits"])[real] - theirs.logits.numpy()[real]).max() < 1e-4
    encoder = torch_outputs(load(transformers.AutoModel, out, config), ids, types, mask)
    hidden = np.asarray(ours["hidden_states"])
    assert np.abs(hidden[real] - encoder.last_hidden_state.numpy()[real]).max() < 1e-4
    assert np.abs(np.asarray(ours["pooled"]) - encoder.pooler_output.numpy()).max() < 1e-4
    assert_round_trip(out, params, config)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["multi_head", "talking_heads_hk_hv"])
@pytest.mark.parametrize("labels", [("negative", "neutral", "positive"), None])
def test_classifier_export_computes_our_logits_with_its_labels(variant, labels, tokenizer,
                                                              tmp_path):
    """labels None: a regression head (STS-B), one output."""
    vocab = tokenizer.get_vocab_size()
    config = tiny_model_config(vocab_size=vocab, **VARIANTS[variant])
    model = BertForSequenceClassification(config, len(labels) if labels else 1)
    ids, types, mask = batch(vocab)
    params = perturbed(init_params(model, jnp.asarray(ids)))
    ours = np.asarray(model.apply({"params": params}, ids, types, mask))
    out = tmp_path / "export"
    export_lib.save_pretrained(params, config, tokenizer, out, labels=labels,
                               regression=labels is None)
    hf_model = load(transformers.AutoModelForSequenceClassification, out, config)
    if labels:
        assert hf_model.config.id2label == dict(enumerate(labels))
    else:
        assert hf_model.config.num_labels == 1 and hf_model.config.problem_type == "regression"
    theirs = torch_outputs(hf_model, ids, types, mask).logits.numpy()
    assert np.abs(ours - theirs).max() < 1e-4
    assert_round_trip(out, params, config)


def test_plain_export_holds_what_transformers_saves_plus_the_pooler(tokenizer, tmp_path):
    """The file transformers' own BertForMaskedLM.save_pretrained writes (tied decoder
    left out), with the pooler beside it for AutoModel; and its tokenizer loads."""
    config = tiny_model_config(vocab_size=tokenizer.get_vocab_size())
    params = init_params(BertForMaskedLM(config), jnp.zeros((1, 4), jnp.int32))
    export_lib.save_pretrained(params, config, tokenizer, tmp_path / "ours")
    hf_config = transformers.BertConfig(**{
        k: v for k, v in json.loads((tmp_path / "ours" / "config.json").read_text()).items()
        if k not in ("architectures", "model_type")})
    transformers.BertForMaskedLM(hf_config).save_pretrained(tmp_path / "theirs")
    ours = set(load_state_dict(str(tmp_path / "ours")))
    theirs = set(load_state_dict(str(tmp_path / "theirs")))
    assert ours == theirs | {"bert.pooler.dense.weight", "bert.pooler.dense.bias"}
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "ours")
    text = "the cat sat on the [MASK] ."
    assert hf_tokenizer(text)["input_ids"] == tokenizer.encode(text).ids


def test_a_failed_export_leaves_nothing_and_an_existing_one_stays(tokenizer, tmp_path,
                                                                  monkeypatch):
    import input_pipeline.tokenizer as tokenizer_lib

    config = tiny_model_config(vocab_size=tokenizer.get_vocab_size())
    params = init_params(BertModel(config), jnp.zeros((1, 4), jnp.int32))
    params = {"bert": params, "mlm_head": init_params(
        BertForMaskedLM(config), jnp.zeros((1, 4), jnp.int32))["mlm_head"]}
    out = tmp_path / "export"

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tokenizer_lib, "save_tokenizer", disk_full)
    with pytest.raises(OSError, match="No space"):
        export_lib.save_pretrained(params, config, tokenizer, out)
    assert os.listdir(tmp_path) == []  # neither the export nor its temporary directory
    monkeypatch.undo()

    export_lib.save_pretrained(params, config, tokenizer, out)
    before = (out / "model.safetensors").read_bytes()
    with pytest.raises(export_lib.ExportError, match="export exists.*--overwrite"):
        export_lib.save_pretrained(perturbed(params), config, tokenizer, out)
    monkeypatch.setattr(tokenizer_lib, "save_tokenizer", disk_full)
    with pytest.raises(OSError, match="No space"):
        export_lib.save_pretrained(perturbed(params), config, tokenizer, out, overwrite=True)
    assert (out / "model.safetensors").read_bytes() == before  # a failed one replaced nothing
    monkeypatch.undo()
    export_lib.save_pretrained(perturbed(params), config, tokenizer, out, overwrite=True)
    assert (out / "model.safetensors").read_bytes() != before
    assert sorted(os.listdir(tmp_path)) == ["export"]


# -- a pretraining run, as a user exports it ---------------------------------------------
@pytest.fixture(scope="module")
def talking_heads_run(tmp_path_factory, run_corpus):
    """A tiny talking-heads pretraining run (40 steps): an export needing remote code."""
    from helpers import tiny_run_config

    from training.pretrain import train_and_evaluate

    workdir = str(tmp_path_factory.mktemp("th_run") / "run")
    corpus, cache = run_corpus
    train_and_evaluate(tiny_run_config(corpus, cache, steps=40, **{
        "model.attention": "talking_heads", "model.key_size": 16}), workdir)
    return workdir


@pytest.mark.slow
def test_export_script_and_fill_mask_agree_with_transformers_pipeline(talking_heads_run,
                                                                      tmp_path):
    from training.export import read_run_model
    from training.fill_mask import fill_mask

    out = tmp_path / "export"
    done = run_script("export_hf.py", ["--workdir", talking_heads_run, "--out", str(out)])
    assert done.returncode == 0, done.stderr
    assert "@40" in done.stdout and "trust_remote_code=True" in done.stdout
    text = "the cat sat on the [MASK] and looked at the [MASK] ."
    ours = fill_mask(read_run_model(talking_heads_run), text, top_k=5)
    pipe = transformers.pipeline("fill-mask", model=str(out), trust_remote_code=True,
                                 device="cpu")
    theirs = pipe(text, top_k=5)
    for mine, other in zip(ours, theirs, strict=True):
        assert [i for i, _, _ in mine] == [r["token"] for r in other]
        np.testing.assert_allclose([p for _, _, p in mine], [r["score"] for r in other],
                                   atol=1e-5)

    shown = run_script("fill_mask.py", ["--workdir", talking_heads_run, "--top_k", "3", text])
    assert shown.returncode == 0, shown.stderr
    first = shown.stdout.splitlines()[2]
    assert first.startswith("  [MASK] 1: ") and ours[0][0][1] in first


@pytest.mark.slow
def test_export_of_a_workdir_without_checkpoints_is_one_error_line(tmp_path):
    (tmp_path / "run").mkdir()
    out = tmp_path / "export"
    done = run_script("export_hf.py", ["--workdir", str(tmp_path / "run"), "--out", str(out)])
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'run'}: no checkpoints/ " \
                                                   f"(not a pretraining run?)"
    assert not out.exists() and os.listdir(tmp_path) == ["run"]
