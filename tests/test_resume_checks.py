"""The resume check on the corpus without a run: a checkpoint from before content
hashing (its corpus identity hashed the files' sizes and times) still resumes on its
unchanged corpus, and is refused, saying why, when those changed."""

from __future__ import annotations

import os

import ml_collections
import pytest

from input_pipeline.corpus import CONTENT_IDENTITY, TextFiles
from training.pretrain_loop import TrainingError
from training.resume import LEGACY_CORPUS_IDENTITY, check_same_data, data_identity


def data_config(corpus: str) -> ml_collections.ConfigDict:
    from configs import pretrain

    config = pretrain.get_config("size=micro").data
    config.corpus = corpus
    return config


@pytest.fixture()
def corpus(tmp_path) -> str:
    path = tmp_path / "corpus.txt"
    path.write_text("The cat sat on the mat.\nThe dog lay by the door.\n" * 20)
    return str(path)


def saved_with(corpus_identity: str) -> dict:
    return {"data_identity": {"corpus": "c", "corpus_identity": corpus_identity}}


def test_a_checkpoint_from_before_content_hashing_resumes_on_its_unchanged_corpus(corpus):
    identity = data_identity(data_config(corpus), None)
    legacy = TextFiles((corpus,)).legacy_identity()
    assert identity[LEGACY_CORPUS_IDENTITY] == legacy
    assert identity["corpus_identity"].startswith(CONTENT_IDENTITY)
    check_same_data(saved_with(legacy), identity, data_config(corpus), "run")


def test_a_checkpoint_from_before_content_hashing_is_refused_once_the_times_change(corpus):
    legacy = TextFiles((corpus,)).legacy_identity()
    os.utime(corpus, ns=(1, 10**18))
    identity = data_identity(data_config(corpus), None)
    with pytest.raises(TrainingError, match="another corpus .*predates content checks"):
        check_same_data(saved_with(legacy), identity, data_config(corpus), "run")


def test_a_content_identity_that_differs_is_refused_without_the_legacy_hint(corpus, tmp_path):
    identity = data_identity(data_config(corpus), None)
    other = tmp_path / "other.txt"
    other.write_text("Quite another text.\n" * 20)
    with pytest.raises(TrainingError, match="another corpus") as refused:
        check_same_data(saved_with(data_identity(data_config(str(other)), None)
                                   ["corpus_identity"]), identity, data_config(corpus), "run")
    assert "predates" not in str(refused.value)


def test_a_hub_corpus_checkpoint_without_an_identity_is_refused_with_no_file_hint():
    """Sources without a legacy identity (hub datasets, synthetic tasks): a saved identity
    that is missing or differs is refused, and not with the local files' times hint."""
    identity = {"corpus": "hf:wikitext", "corpus_identity": "abc", "tokenizer_hash": "t"}
    config = data_config("hf:wikitext")
    for saved in ({"data_identity": {"corpus": "hf:wikitext", "tokenizer_hash": "t"}},
                  saved_with("def")):
        with pytest.raises(TrainingError, match="another corpus") as refused:
            check_same_data(saved, identity, config, "run")
        assert "predates" not in str(refused.value)


def test_a_checkpoint_saved_before_scan_layers_existed_is_unrolled_and_refused_as_scanned():
    """A saved model config without scan_layers was written by unrolled code: it resumes
    as unrolled whatever today's default, and a scanned config is refused in one line
    naming the layout and how to resume."""
    from models import ModelConfig
    from training.resume import check_same_architecture

    unrolled = ModelConfig(scan_layers=False)
    saved = {"model": {k: v for k, v in unrolled.to_dict().items() if k != "scan_layers"}}
    assert ModelConfig.from_config(saved["model"]).scan_layers is False
    check_same_architecture(saved, unrolled, "run")
    with pytest.raises(TrainingError, match=r"run holds a checkpoint with unrolled \(a subtree "
                                            r"per layer\) parameters .* scan=false"):
        check_same_architecture(saved, ModelConfig(scan_layers=True), "run")
