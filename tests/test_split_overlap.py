"""scripts/split_overlap.py: the share of a run's eval n-grams found in its training split,
against exact sets of token tuples (no hashing) over the same cached token ids."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import run_script, tiny_run_config, write_run_corpus

from analysis.split_overlap import overlap
from input_pipeline import from_config


def exact_shares(train, held_out, n: int, pad: int) -> tuple[float, list[float]]:
    def grams(row):
        return [tuple(row[i:i + n]) for i in range(len(row) - n + 1)
                if pad not in row[i:i + n]]
    known = {g for row in train for g in grams(list(row))}
    per_sequence = [(sum(g in known for g in grams(list(row))), len(grams(list(row))))
                    for row in held_out]
    seen = sum(s for s, _ in per_sequence) / sum(t for _, t in per_sequence)
    return seen, [s / t for s, t in per_sequence if t]


def test_hand_counted_shares():
    train = np.array([[1, 2, 3, 4, 0]])
    held_out = np.array([[2, 3, 4, 9, 0], [7, 7, 7, 0, 0]])
    got = overlap(train, held_out, n=3, pad=0)
    # (2,3,4) seen, (3,4,9) and (7,7,7) not; n-grams over padding are not counted.
    assert got["eval_ngrams"] == 3 and got["seen_in_train"] == pytest.approx(1 / 3)
    assert got["sequences_over_half_seen"] == 0.0  # 1/2 is not over half
    assert got["sequences"] == 2 and got["sequences_over_90pct_seen"] == 0.0
    # Order matters: the same tokens reversed are another n-gram.
    assert overlap(np.array([[1, 2, 3]]), np.array([[3, 2, 1]]), n=3, pad=0)[
        "seen_in_train"] == 0.0
    # Padding inside a sequence cuts its n-grams; a row with none is not a sequence here.
    inside = overlap(np.array([[5, 6, 7, 8]]), np.array([[5, 6, 0, 7, 8, 9], [0, 0, 0, 0, 0, 9]]),
                     n=2, pad=0)
    assert (inside["eval_ngrams"], inside["seen_in_train"], inside["sequences"]) == (3, 2 / 3, 1)
    assert inside["sequences_over_half_seen"] == 1.0 and inside["sequences_over_90pct_seen"] == 0
    with pytest.raises(ValueError, match="longer than the sequences"):
        overlap(train, held_out, n=6, pad=0)


def test_a_runs_overlap_matches_exact_tuple_sets(tmp_path):
    corpus = write_run_corpus(str(tmp_path))  # shuffled repeats of a few sentences
    workdir = tmp_path / "run"
    config = tiny_run_config(corpus, str(tmp_path / "cache"), steps=2)
    os.makedirs(workdir)
    (workdir / "config.json").write_text(json.dumps(config.to_dict()))
    out = tmp_path / "overlap.json"
    result = run_script("split_overlap.py", [f"--workdir={workdir}", "--n=4", "--n=13",
                                             f"--json={out}"])
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())[str(workdir)]

    data = from_config(config.data, str(workdir))
    num_eval = min(len(data.eval), config.eval_batches * config.batch_size)
    assert report["eval_sequences"] == num_eval
    for row in report["by_n"]:
        seen, per_sequence = exact_shares(np.asarray(data.train.input_ids),
                                          np.asarray(data.eval.input_ids[:num_eval]),
                                          row["n"], data.special.pad)
        assert row["seen_in_train"] == pytest.approx(seen, abs=1e-12)
        assert row["sequences_over_half_seen"] == pytest.approx(
            np.mean(np.array(per_sequence) > 0.5))
    assert 0 < report["by_n"][0]["seen_in_train"] <= 1  # the corpus repeats its sentences
    assert f"% of {report['by_n'][1]['eval_ngrams']} eval 13-grams occur in" in result.stdout


def test_a_folder_without_a_run_is_one_error_line(tmp_path):
    result = run_script("split_overlap.py", [f"--workdir={tmp_path}"])
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path}: no readable config.json (not a pretraining run?)")
