"""Pretraining end to end (train.py, training/pretrain.py): the loss falls, TensorBoard
scalars, the loop's device reads, host masking, a bad flag. (Resume: test_reliability.py,
test_multiprocess.py; refused resumes: test_workdir.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, tiny_run_config

from training.pretrain import train_and_evaluate

pytestmark = pytest.mark.slow  # every test pretrains or starts train.py


def test_loss_falls_and_tensorboard_has_the_scalars(run_corpus, tmp_path, capsys):
    text, _ = run_corpus
    workdir = str(tmp_path / "run")
    config = tiny_run_config(text, str(tmp_path / "cache"), steps=60)  # a cold cache
    final = train_and_evaluate(config, workdir)
    assert final["eval_loss"] < np.log(200) - 1.0  # well below uniform guessing
    check_console(capsys.readouterr().out, workdir, final)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(workdir)
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {"loss", "mlm_accuracy", "learning_rate", "grad_norm", "param_norm",
                "tokens_per_s", "step_time_s", "mfu", "eval_loss",
                "eval_accuracy", "eval_perplexity"}
    assert expected <= tags
    losses = [e.value for e in events.Scalars("loss")]
    assert len(losses) == 12 and losses[-1] < 0.8 * losses[0]
    eval_losses = events.Scalars("eval_loss")
    assert [e.step for e in eval_losses] == [10, 20, 30, 40, 50, 60]
    assert eval_losses[-1].value < eval_losses[0].value - 0.5
    assert "config/text_summary" in events.Tags()["tensors"]
    assert os.path.exists(os.path.join(workdir, "final_metrics.json"))


def check_console(out: str, workdir: str, final: dict) -> None:
    """What a user reads: each step of the start (tokenizer, cache, compilation) is said
    before the first step line; no ETA while the step time includes the compilation;
    the run ends on where it stands, its files and the next commands."""
    lines = out.splitlines()
    start = [next(i for i, x in enumerate(lines) if re.match(pattern, x)) for pattern in (
        "data: training a 200-token WordPiece vocabulary", "data: trained the vocabulary",
        "data: tokenizing and packing", "data: packed ", r"data: \d+ train / \d+ eval",
        "model multi_head", "compiling the train step; the first line comes at step 5",
        "step 5/60")]
    assert start == sorted(start), lines
    assert re.search(r"\(first 5 steps with compilation: [\d.]+ s; ETA at the next line\)$",
                     lines[start[-1]]), lines[start[-1]]
    assert "ETA 00:00:" in next(x for x in lines if x.startswith("step 10/60"))
    summary = lines[lines.index(next(x for x in lines if x.startswith("done: "))):]
    assert summary[0].startswith("done: step 60/60 (steps 1-60 in 00:0")
    assert summary[1] == "final metrics: " + " ".join(
        f"{k}={final[k]:.4f}"
        for k in ("train_loss", "eval_loss", "eval_accuracy", "eval_perplexity"))
    assert summary[2] == f"checkpoints: {workdir}/checkpoints (latest step 60, best eval_loss " \
                         f"at step {summary[2].split()[-1][:-1]})"
    assert f"tensorboard --logdir {workdir}" in summary[3]
    assert summary[4] == f"final_metrics.json: {workdir}/final_metrics.json"
    assert f"eval_glue.py --config configs/glue.py:task=rte --config.init_from={workdir}" \
        in summary[6] and f"export_hf.py --workdir {workdir}" in summary[7]


def run_train_py(workdir: str, args: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "train.py", "--config", "configs/pretrain.py:size=micro",
               "--workdir", workdir, *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_bad_config_is_one_clear_line_and_nonzero_exit(tmp_path):
    result = run_train_py(str(tmp_path / "bad"), ["--config.model.num_heads=5"])
    assert result.returncode != 0
    assert "model.num_heads=5 does not divide model.hidden_size=32" in result.stderr
    assert not os.path.exists(tmp_path / "bad" / "checkpoints")


def test_the_loop_reads_the_device_only_at_log_eval_and_checkpoint_steps(run_corpus, tmp_path,
                                                                         monkeypatch):
    """Step s+1 is dispatched before anything of step s is read: no read per step."""
    import jax

    reads = []
    real_device_get = jax.device_get
    monkeypatch.setattr(jax, "device_get", lambda x: reads.append(1) or real_device_get(x))
    config = tiny_run_config(*run_corpus, steps=30, log_every_steps=10, eval_every_steps=30,
                             checkpoint_every_steps=30)
    train_and_evaluate(config, str(tmp_path / "run"))
    # 3 logs (metrics + health each), the health check before eval/checkpoint, 2 eval
    # batches, and reads outside the loop (restore, setup): far below one per step.
    assert len(reads) <= 12, len(reads)


def test_host_masking_is_still_a_choice(run_corpus, tmp_path):
    """data.masking=host: numpy masks on the host (the reference recipe) and the step
    takes masked batches."""
    config = tiny_run_config(*run_corpus, steps=10, **{"data.masking": "host"})
    final = train_and_evaluate(config, str(tmp_path / "run"))
    assert np.isfinite(final["train_loss"]) and final["eval_loss"] < 9
