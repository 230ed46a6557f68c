"""scripts/compare_finetuning.py: rows at their best learning rate, paired by fine-tuning
seed, tested as scipy does, Holm over the table; bad rows are one error line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats

from analysis import finetune_compare
from models import ModelConfig
from training import results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ModelConfig(num_layers=1, hidden_size=32, num_heads=4, mlp_dim=64, vocab_size=100)
PROTOCOL = {"max_seq_length": 64, "batch_size": 32, "num_epochs": 2.0,
            "max_train_examples": 2000}


def write_workdir(path, scores: dict[float, list[float]], model=MODEL, task="SST-2",
                  **protocol):
    """A GLUE workdir as eval_glue.py leaves it: identity and one result.json per run."""
    os.makedirs(path)
    with open(os.path.join(path, "glue_identity.json"), "w") as f:
        json.dump({"init": f"hf:{os.path.basename(path)}", "model": model.to_dict(),
                   **PROTOCOL, **protocol}, f)
    for lr, per_seed in scores.items():
        for seed, value in enumerate(per_seed):
            run_dir = os.path.join(path, task, results.glue_run_name(lr, seed))
            os.makedirs(run_dir)
            results.RunResult(task, lr, seed, 10, {"dev": {"accuracy": value}}, value,
                              0.1).write(run_dir)
    return str(path)


def test_rows_pair_by_seed_at_their_best_learning_rate_with_holm(tmp_path):
    a = write_workdir(tmp_path / "a", {5e-5: [80.0, 81.0, 82.0, 80.5, 81.5],
                                       2e-4: [70.0, 71.0, 72.0, 70.5, 71.5]})
    b_best = [82.0, 82.4, 84.1, 81.9, 83.0]
    b = write_workdir(tmp_path / "b", {5e-5: [79.0, 80.0, 81.0, 79.5, 80.5], 2e-4: b_best},
                      model=MODEL.replace(attention="talking_heads"))
    c = write_workdir(tmp_path / "c", {5e-5: [80.1, 80.9, 82.2, 80.4, 81.6]})
    rows = finetune_compare.parse_rows([f"a={a}", f"b={b}", f"c={c}"])
    assert [r.best_lr("SST-2") for r in rows] == [5e-5, 2e-4, 5e-5]
    tests = finetune_compare.run_tests(rows, [("a", "b"), ("a", "c")])
    ab, ac = tests
    base = [80.0, 81.0, 82.0, 80.5, 81.5]
    assert ab.p_t == pytest.approx(scipy.stats.ttest_rel(b_best, base).pvalue)
    ci = scipy.stats.t.interval(0.95, 4, loc=np.mean(np.subtract(b_best, base)),
                                scale=scipy.stats.sem(np.subtract(b_best, base)))
    assert ab.ci == pytest.approx(ci)
    # Holm over two tests: the smaller p doubled, the larger at least that.
    low, high = sorted([ab, ac], key=lambda t: t.p_t)
    assert low.p_holm == pytest.approx(min(1, 2 * low.p_t))
    assert high.p_holm == pytest.approx(max(low.p_holm, high.p_t))
    assert ab.verdict("t", 0.05) == "b better"
    assert ac.verdict("t", 0.05) == "equivalent (±1)"  # differences within ±0.2
    assert ab.cost_b[1] > ab.cost_a[1]  # talking heads' mixing costs FLOPs
    text = finetune_compare.render(rows, tests, 0.05)
    assert "2e-4†" not in text and "lr 0.0002†" in text  # b's best is the grid's edge
    assert "Holm over 2" in text


@pytest.mark.slow  # scripts in subprocesses
def test_the_script_writes_both_files_or_one_error_line(tmp_path):
    a = write_workdir(tmp_path / "a", {5e-5: [80.0, 81.0, 82.0]})
    b = write_workdir(tmp_path / "b", {5e-5: [80.5, 81.0, 83.0]}, max_train_examples=4000)
    out = tmp_path / "out"
    script = [sys.executable, os.path.join(ROOT, "scripts", "compare_finetuning.py")]
    bad = subprocess.run(script + [f"--row=a={a}", f"--row=b={b}", f"--out={out}"],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        "error: --row b: its protocol differs from a's in max_train_examples; fine-tuning "
        "seeds pair only within one"]
    assert not out.exists()
    missing = subprocess.run(script + [f"--row=a={a}", f"--row=x={tmp_path}", f"--out={out}"],
                             capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 1 and "no glue_identity.json" in missing.stderr
    c = write_workdir(tmp_path / "c", {5e-5: [81.0, 82.0, 82.5]})
    good = subprocess.run(script + [f"--row=a={a}", f"--row=c={c}", f"--out={out}"],
                          capture_output=True, text=True, cwd=ROOT)
    assert good.returncode == 0, good.stderr
    saved = json.loads((out / "table.json").read_text())
    assert [t["a"] + ":" + t["b"] for t in saved["tests"]] == ["a:c"]
    assert saved["tests"][0]["diff"] == pytest.approx(2.5 / 3)
    assert "| a | hf:a |" in (out / "table.md").read_text()
