"""scripts/unigram_baseline.py: the unigram yardstick of a run, against a count made
independently with collections.Counter over the same cached token ids."""

from __future__ import annotations

import collections
import json
import math
import os

import pytest
from helpers import run_script, tiny_run_config, write_run_corpus

from input_pipeline import from_config
from training import results


def test_unigram_loss_matches_a_direct_count_and_the_gap_uses_the_runs_eval_loss(tmp_path):
    corpus = write_run_corpus(str(tmp_path))
    workdir = tmp_path / "run"
    config = tiny_run_config(corpus, str(tmp_path / "cache"), steps=2)
    os.makedirs(workdir)
    (workdir / "config.json").write_text(json.dumps(config.to_dict()))
    results.FinalMetrics(step=2, train_loss=5.0, eval={"eval_loss": 4.0}).write(str(workdir))

    out = tmp_path / "baseline.json"
    result = run_script("unigram_baseline.py", [f"--workdir={workdir}", f"--json={out}"])
    assert result.returncode == 0, result.stderr
    got = json.loads(out.read_text())[str(workdir)]

    data = from_config(config.data, str(workdir))
    special = {data.special.pad, data.special.cls, data.special.sep, data.special.mask}
    counts = collections.Counter(int(t) for row in data.train.input_ids for t in row
                                 if int(t) not in special)
    total = sum(counts.values()) + data.vocab_size - len(special)  # add-one, no specials
    scored = [int(t) for row in data.eval.input_ids[:config.eval_batches * config.batch_size]
              for t in row if int(t) not in special]
    want = -sum(math.log((counts[t] + 1) / total) for t in scored) / len(scored)
    assert got["unigram_loss"] == pytest.approx(want, rel=1e-9)
    assert got["scored_tokens"] == len(scored)
    assert got["below_unigram"] == pytest.approx(want - 4.0, rel=1e-9)
    assert f"{want:.3f} nats" in result.stdout


def test_a_folder_without_a_run_is_one_error_line(tmp_path):
    result = run_script("unigram_baseline.py", [f"--workdir={tmp_path}"])
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path}: no readable config.json (not a pretraining run?)")
