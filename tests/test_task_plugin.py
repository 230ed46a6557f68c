"""A fine-tuning task is a plug-in: one file, written here to a temporary folder and named
in FINETUNING_TASKS, is registered, configured by name (its own config field and short
arg), fine-tuned one epoch on a tiny data set through finetune.py, scored, recorded,
and resumed after a signal to the same result; no other file knows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import (
    REPO,
    SST2_FILLER,
    SST2_NEGATIVE,
    SST2_POSITIVE,
    child_xla_flags,
    tiny_run_config,
    write_run_corpus,
)

from training.pretrain import train_and_evaluate

# A task of its own format (JSON lines of text and label) and metric (accuracy and the
# share of positives predicted), encoded with the tokenizer directly: nothing of GLUE's.
TOY_TASK = '''
import json

import numpy as np

from finetuning import Task, TaskData, register
from models import BertForSequenceClassification
from training import steps
from common.files import write_text_atomic


class Polarity(Task):
    key = "polarity"
    name = "Polarity"
    main_metric = "accuracy"
    metric_names = ("accuracy", "positive_share")
    config_fields = {"polarity_file": ""}
    short_args = {"polarity_file": "polarity_file"}

    def read(self, config):
        with open(config.polarity_file) as f:
            rows = [json.loads(line) for line in f]
        return {"train": rows[:96], "dev": rows[96:]}

    def encode(self, read, config, tokenizer):
        splits = {}
        for split, rows in read.items():
            ids = np.zeros((len(rows), config.max_seq_length), np.int32)
            for i, row in enumerate(rows):
                pieces = tokenizer.encode(row["text"]).ids[:config.max_seq_length]
                ids[i, :len(pieces)] = pieces
            splits[split] = {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
                             "attention_mask": (ids != 0).astype(np.int32),
                             "labels": np.asarray([r["label"] for r in rows], np.int32)}
        return TaskData(splits)

    def model(self, model_config):
        return BertForSequenceClassification(model_config, 2)

    def objective(self):
        return steps.ClassifierObjective(False)

    def predict_step(self, model, gather):
        return steps.make_predict_step(model, False, gather)

    def score(self, data, split, predictions, run_dir):
        labels = data[split]["labels"]
        return {"accuracy": 100.0 * float(np.mean(predictions == labels)),
                "positive_share": 100.0 * float(np.mean(predictions == 1))}

    def report(self, suite, summary, workdir, label, source):
        score = summary.scores["Polarity/accuracy"]
        table = f"| model | Polarity |\\n|---|---|\\n| {label} | {score.mean:.1f} |"
        write_text_atomic(f"{workdir}/results.md", table + "\\n")
        return table


register(Polarity())
'''


def write_polarity(path: str) -> None:
    """128 sentences; a positive word means label 1 (the first 96 train, then dev)."""
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for _ in range(128):
            label = int(rng.integers(2))
            words = list(rng.choice(SST2_FILLER, size=5))
            words.insert(int(rng.integers(6)), rng.choice(SST2_POSITIVE if label
                                                          else SST2_NEGATIVE))
            f.write(json.dumps({"text": " ".join(words), "label": label}) + "\n")


# Stops the run at its fifth check of the preemption flag (a step of training), as a
# SIGTERM would, then reruns the same command: the run continues from its checkpoint.
RESUME = '''
import sys
import finetuning
from configs import finetune
from training import preemption
from training.cli import Stopped

config = finetune.get_config(sys.argv[1])
config.init_from, config.log_every_steps, config.jax_cache = sys.argv[2], 1, "none"
calls = {"n": 0}
real = preemption.PreemptionFlag.requested
def stop_at_5(self):
    calls["n"] += 1
    self.signal_name = "SIGTERM"
    return calls["n"] == 5
preemption.PreemptionFlag.requested = stop_at_5
try:
    finetuning.run(config, sys.argv[3])
    raise SystemExit("not stopped")
except Stopped as e:
    print("stopped:", e)
preemption.PreemptionFlag.requested = real
finetuning.run(config, sys.argv[3])
'''


@pytest.mark.slow
def test_a_task_in_its_own_file_is_fine_tuned_scored_recorded_and_resumed(tmp_path):
    corpus = write_run_corpus(str(tmp_path), sst2_words=True)
    pretrained = str(tmp_path / "pretrain")
    train_and_evaluate(tiny_run_config(corpus, str(tmp_path / "cache"), steps=10), pretrained)
    task_file = tmp_path / "polarity_task.py"
    task_file.write_text(textwrap.dedent(TOY_TASK))
    data = str(tmp_path / "polarity.jsonl")
    write_polarity(data)
    env = dict(os.environ, FINETUNING_TASKS=str(task_file), XLA_FLAGS=child_xla_flags(),
               JAX_PLATFORMS="cpu")
    arg = f"task=polarity,polarity_file={data},epochs=1,seeds=1,lr=3e-3,batch=16,seq_len=16"

    straight = tmp_path / "straight"
    done = subprocess.run(
        [sys.executable, "finetune.py", "--config", f"configs/finetune.py:{arg}",
         "--workdir", str(straight), f"--config.init_from={pretrained}",
         "--config.jax_cache=none"], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Polarity [1/1] lr=0.003 seed=0: dev:" in done.stdout
    results = json.loads((straight / "results.json").read_text())
    summary = results["tasks"]["Polarity"]
    assert set(summary["scores"]) == {"Polarity/accuracy", "Polarity/positive_share"}
    assert summary["metric"] == "accuracy"  # readers cannot look a plug-in up by name
    run = json.loads((straight / "Polarity" / "lr0.003_seed0" / "result.json").read_text())
    assert run["steps"] == 6 and run["main"] == summary["main"]["Polarity"]  # 96 / 16
    assert (straight / "results.md").read_text().startswith("| model | Polarity |")
    assert (straight / "Polarity" / "lr0.003_seed0" / "dev_predictions.npy").exists()

    resumed = tmp_path / "resumed"
    again = subprocess.run([sys.executable, "-c", RESUME, arg, pretrained, str(resumed)],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "stopped: SIGTERM: saved Polarity lr=0.003 seed=0 at step" in again.stdout
    assert json.loads((resumed / "results.json").read_text())["tasks"] == results["tasks"]

    # Without the file named (this process never read FINETUNING_TASKS), the task does
    # not exist: one error naming the choices.
    from configs import finetune

    with pytest.raises(ValueError, match=r"unknown task 'polarity'; use all or a list of .*sst2"):
        finetune.get_config(arg)


def test_the_sweep_runs_a_plug_in_task_through_finetune_py(tmp_path):
    """scripts/sweep.py --glue_tasks reads the task registry: a task in its own file is
    one more fine-tuning job per run, run by finetune.py with the row's fine-tuning args;
    an unknown name is one error line naming the registered tasks."""
    import shlex

    task_file = tmp_path / "polarity_task.py"
    task_file.write_text(textwrap.dedent(TOY_TASK))
    out = tmp_path / "out"
    env = dict(os.environ, FINETUNING_TASKS=str(task_file), XLA_FLAGS=child_xla_flags(),
               JAX_PLATFORMS="cpu")
    args = ["scripts/sweep.py", "--grid=talking_heads_cpu", f"--out={out}", "--dry_run",
            "--glue_tasks=sst2,polarity", "--glue_args=seeds=2"]
    planned = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=120)
    assert planned.returncode == 0, planned.stderr
    commands = [shlex.split(x) for x in planned.stdout.splitlines()
                if x.startswith(sys.executable)]
    polarity = [c for c in commands if c[1] == "finetune.py"]
    glue_jobs = [c for c in commands if c[1] == "eval_glue.py"]
    assert polarity and len(polarity) == len(glue_jobs)  # one per run
    assert polarity[0][2:4] == ["--config", "configs/finetune.py:task=Polarity,seeds=2"]
    assert not out.exists()

    env.pop("FINETUNING_TASKS")
    unknown = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=120)
    assert unknown.returncode != 0 and "unknown; choose one of" in unknown.stderr
    assert "squad" in unknown.stderr and not out.exists()


def test_configs_of_several_tasks_are_their_own_and_of_one_kind(tmp_path):
    """task=all builds (the tasks share their fields' defaults, not the fields); a value set
    on one config does not reach the next; tasks of different kinds, a GLUE config naming
    SQuAD, and a config pointed at another task with --config.task are refused."""
    import finetuning
    from configs import finetune, glue, squad

    every = glue.get_config("task=all")
    assert every.task == "all" and every.glue_dir is None
    every.glue_dir = str(tmp_path)
    assert glue.get_config("task=sst2/rte").glue_dir is None
    questions = squad.get_config()
    questions.squad_dir = str(tmp_path)
    assert squad.get_config().squad_dir is None
    with pytest.raises(ValueError, match="tasks of different kinds share no config"):
        finetune.get_config("task=sst2/squad")
    with pytest.raises(ValueError, match="SQuAD is not a GLUE task"):
        glue.get_config("task=squad")
    questions.task = "sst2"
    with pytest.raises(ValueError, match=r"has no glue_dir .*configs/finetune.py:task=sst2"):
        finetuning.run(questions, str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def with_plug_ins(tmp_path, files: dict[str, str], code: str) -> subprocess.CompletedProcess:
    """Runs `code` in a process whose FINETUNING_TASKS names `files` (name -> source)."""
    paths = []
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(source))
        paths.append(str(tmp_path / name))
    env = dict(os.environ, FINETUNING_TASKS=os.pathsep.join(paths), JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


NAMED = """
from finetuning import Task, register
class Named(Task):
    key, name, main_metric = {key!r}, {name!r}, "accuracy"
register(Named())
"""


def test_plug_in_names_in_any_spelling_and_their_collisions(tmp_path):
    found = with_plug_ins(tmp_path, {"mine.py": NAMED.format(key="my_task", name="My-Task")},
                          "import finetuning; print(finetuning.get('my-task').key, "
                          "finetuning.get('MY_TASK').name)")
    assert found.returncode == 0 and found.stdout.split() == ["my_task", "My-Task"], found.stderr
    clash = with_plug_ins(tmp_path, {"clash.py": NAMED.format(key="sst_2", name="Other")},
                          "import finetuning; finetuning.names()")
    assert clash.returncode != 0 and "share a name" in clash.stderr and "clash.py" in clash.stderr
    twice = with_plug_ins(tmp_path, {"a/same.py": NAMED.format(key="one", name="One"),
                                     "b/same.py": NAMED.format(key="two", name="Two")},
                          "import finetuning; finetuning.names()")
    assert twice.returncode != 0 and "two plug-ins named 'same.py'" in twice.stderr
    empty = with_plug_ins(tmp_path, {"empty.py": "x = 1\n"},
                          "import finetuning; finetuning.names()")
    assert empty.returncode != 0 and "registers no task" in empty.stderr
