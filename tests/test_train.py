"""Pretraining end to end through train.py's entry function, resume, TensorBoard."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from configs import pretrain
from configs.overrides import apply_overrides
from training.checkpoints import Checkpointer
from training.pretrain import train_and_evaluate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SENTENCES = [
    "The cat sat on the mat and looked at the garden.",
    "A small dog ran across the green field after the ball.",
    "The old man walked to the market to buy fresh bread.",
    "Children played in the park while their parents talked.",
    "The river flows quietly past the village in the valley.",
    "She opened the window and the cold wind came into the room.",
    "The teacher wrote a long sentence on the black board.",
    "Birds sing in the trees early in the morning.",
]


def write_corpus(directory) -> str:
    """A small English corpus: documents of shuffled sentences, blank-line separated."""
    rng = np.random.default_rng(0)
    docs = []
    for _ in range(120):
        docs.append("\n".join(rng.choice(SENTENCES, size=6)))
    path = os.path.join(directory, "corpus.txt")
    with open(path, "w") as f:
        f.write("\n\n".join(docs) + "\n")
    return path


def tiny_args(corpus: str, cache: str, steps: int, **extra) -> list[str]:
    """--config overrides for a one-layer, width-32 run on the tiny corpus."""
    fields = {
        "model.num_layers": 1, "model.hidden_size": 32, "model.num_heads": 4,
        "model.mlp_dim": 64, "model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0,
        "data.corpus": corpus, "data.cache_dir": cache, "data.vocab_size": 200,
        "data.max_seq_length": 32, "data.max_predictions_per_seq": 5,
        "data.eval_fraction": 0.1, "batch_size": 16, "num_train_steps": steps,
        "optimizer.learning_rate": 3e-3, "optimizer.warmup_steps": 5,
        "log_every_steps": 5, "eval_every_steps": 10, "eval_batches": 2,
        "checkpoint_every_steps": 10,
    }
    fields.update(extra)
    return [f"--config.{k}={v}" for k, v in fields.items()]


def tiny_config(corpus: str, cache: str, steps: int, **extra):
    config = pretrain.get_config("size=micro")
    apply_overrides(config, tiny_args(corpus, cache, steps, **extra))
    return config


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    directory = tmp_path_factory.mktemp("corpus")
    return write_corpus(str(directory)), str(directory / "cache")


def test_loss_falls_and_tensorboard_has_the_scalars(corpus, tmp_path):
    text, cache = corpus
    workdir = str(tmp_path / "run")
    config = tiny_config(text, cache, steps=60)
    final = train_and_evaluate(config, workdir)
    assert final["eval_loss"] < np.log(200) - 1.0  # well below uniform guessing

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


def final_params(workdir: str):
    checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True)
    state, _, step = checkpointer.restore()
    return step, state["params"]


def run_train_py(workdir: str, args: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "train.py", "--config", "configs/pretrain.py:size=micro",
               "--workdir", workdir, *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_bad_config_is_one_clear_line_and_nonzero_exit(tmp_path):
    result = run_train_py(str(tmp_path / "bad"), ["--config.model.num_heads=5"])
    assert result.returncode != 0
    assert "model.num_heads=5 does not divide model.hidden_size=32" in result.stderr
    assert not os.path.exists(tmp_path / "bad" / "checkpoints")


def test_the_loop_reads_the_device_only_at_log_eval_and_checkpoint_steps(corpus, tmp_path,
                                                                         monkeypatch):
    """Step s+1 is dispatched before anything of step s is read: no read per step."""
    import jax

    reads = []
    real_device_get = jax.device_get
    monkeypatch.setattr(jax, "device_get", lambda x: reads.append(1) or real_device_get(x))
    config = tiny_config(*corpus, steps=30, log_every_steps=10, eval_every_steps=30,
                         checkpoint_every_steps=30)
    train_and_evaluate(config, str(tmp_path / "run"))
    # 3 logs (metrics + health each), the health check before eval/checkpoint, 2 eval
    # batches, and reads outside the loop (restore, setup): far below one per step.
    assert len(reads) <= 12, len(reads)


def test_host_masking_is_still_a_choice(corpus, tmp_path):
    """data.masking=host: numpy masks on the host (the reference recipe) and the step
    takes masked batches."""
    final = train_and_evaluate(tiny_config(*corpus, steps=10, **{"data.masking": "host"}),
                               str(tmp_path / "run"))
    assert np.isfinite(final["train_loss"]) and final["eval_loss"] < 9
