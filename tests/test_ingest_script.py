"""scripts/prepare_data.py: the tokenizer and cache built once, then found by train.py's
from_config; bad input as one `error:` line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

import input_pipeline as ip
from configs import pretrain
from input_pipeline import ingest

pytestmark = pytest.mark.slow  # every test starts scripts/prepare_data.py

SCRIPT = REPO / "scripts" / "prepare_data.py"


def prepare(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(SCRIPT), "--config",
                           str(REPO / "configs" / "pretrain.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    doc = "The cat sat on the mat.\nA dog ran in the park.\nBirds sing in the trees.\n"
    path.write_text("\n".join(doc for _ in range(80)))
    return path


def test_prepare_data_builds_what_training_then_reads(tmp_path, corpus, monkeypatch):
    fields = {"corpus": str(corpus), "vocab_size": 100, "max_seq_length": 32,
              "cache_dir": str(tmp_path / "shared")}
    result = prepare("--workdir", str(tmp_path / "run"),
                     *(f"--config.data.{k}={v}" for k, v in fields.items()), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    # The build's progress lines (training the vocabulary, packing), then the summary.
    assert result.stdout.startswith("data: training a 100-token WordPiece vocabulary")
    assert "\ndata: tokenizer " in result.stdout and "train /" in result.stdout
    assert len(list((tmp_path / "shared").glob("packed-*"))) == 1
    assert not (tmp_path / "run").exists()  # nothing in the workdir with a shared cache

    def rebuilt(*args, **kwargs):
        raise AssertionError("train.py would have built the cache again")

    monkeypatch.setattr(ingest, "build_packed_entry", rebuilt)
    monkeypatch.setattr(ip.pipeline, "build_packed_entry", rebuilt)
    config = pretrain.get_config()
    config.data.update(fields)
    data = ip.from_config(config.data, tmp_path / "other_run")
    assert str(data.packed_dir) in result.stdout and len(data.train) > 0


@pytest.mark.parametrize("args, code, message", [
    (["--config.data.corpus=/no/such/corpus.txt"], 1, "/no/such/corpus.txt"),
    (["--config.data.no_such_field=1"], 2, "no_such_field"),
])
def test_prepare_data_bad_input_is_one_error_line(tmp_path, args, code, message):
    result = prepare("--workdir", str(tmp_path / "run"), *args, cwd=tmp_path)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == code and last.startswith("error: ") and message in last, \
        result.stderr[-2000:]
