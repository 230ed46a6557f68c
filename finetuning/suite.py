"""A fine-tuning invocation: every task of config.task, each over the learning-rate x
seed grid, in one workdir.

  WORKDIR/TASK/lr{LR}_seed{S}/result.json   one finished run (finetuning/runs.py)
  WORKDIR/results.json                      every task's summary: mean, std and each
                                            seed's scores at the best learning rate (by
                                            the mean main dev score over seeds)
  WORKDIR/results.md                        the task's table (Task.report)
  WORKDIR/tokenizer/                        the tokenizer of every run here
  WORKDIR/glue_identity.json                the pretrained model and protocol this
                                            workdir belongs to

A rerun skips finished runs; a workdir of another model or protocol is refused; a
second invocation on a live workdir is refused; a signal at any moment stops it
resumably. The file formats are training/results.py's records.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import ml_collections

import input_pipeline
from common.files import write_json_atomic
from finetuning import registry
from finetuning.batching import length_buckets
from finetuning.pretrained import Pretrained, load_pretrained
from finetuning.runs import SAVE_MODEL, finetune_run, make_mesh, prune_fine_tuned
from finetuning.task import Task, TaskData
from training import metrics, results, steps
from training import workdir as workdir_lib
from training.cli import Stopped
from training.preemption import PreemptionFlag
from training.workdir import WorkdirLock

TOKENIZER = results.TOKENIZER_DIR  # WORKDIR/tokenizer/ (scripts/export_hf.py reads it)
IDENTITY = results.FINE_TUNING_IDENTITY


def run(config: ml_collections.ConfigDict, workdir: str, devices=None) -> dict[str, Any]:
    """Every task of config.task on the mesh of config.mesh (over `devices`, default all)."""
    tasks = registry.resolve(config.task)
    check_config_has_task_fields(config, tasks)
    length_buckets(config.length_buckets, config.max_seq_length)  # a bad spec: fail first
    if config.save_model not in SAVE_MODEL:
        raise ValueError(f"save_model={config.save_model!r} is unknown; choose one of "
                         f"{', '.join(SAVE_MODEL)}")
    mesh_and_rules = make_mesh(config, devices)  # bad mesh or batch sizes: fail first
    with workdir_lib.started(workdir), WorkdirLock(workdir), PreemptionFlag() as preemption:
        return _run(config, workdir, tasks, mesh_and_rules, preemption)


def _run(config: ml_collections.ConfigDict, workdir: str, tasks: list[Task],
         mesh_and_rules, preemption: PreemptionFlag) -> dict[str, Any]:
    read, skipped = {}, {}
    for task in tasks:  # a broken file fails before the model is loaded
        try:
            read[task.key] = task.read(config)
        except task.data_errors as e:
            if len(tasks) == 1:
                raise
            skipped[task.key] = e
    pretrained = load_pretrained(config)
    check_workdir_identity(workdir, pretrained, config)
    tokenizer_dir = os.path.join(workdir, TOKENIZER)
    if jax.process_index() == 0 and not os.path.exists(os.path.join(tokenizer_dir,
                                                                    "tokenizer.json")):
        input_pipeline.save_tokenizer(pretrained.tokenizer, tokenizer_dir)
    # Tasks fine-tuned (or skipped) by earlier invocations in this workdir stay in the table.
    suite = results.FineTuningResults.continued(pretrained.source,
                                                results.FineTuningResults.read(workdir))
    for task in tasks:
        if preemption.requested():
            raise Stopped(f"{preemption.signal_name}: stopped before {task.name} (finished "
                          f"runs are saved); rerun the same command to continue")
        try:
            if task.key in skipped:
                raise skipped[task.key]
            data = task.encode(read[task.key], config, pretrained.tokenizer)
        except task.data_errors as e:
            if len(tasks) == 1:
                raise
            metrics.console(f"skipping {task.name}: {e}")
            suite.record(task.name, skipped=str(e))
            continue
        summary = run_grid(task, pretrained, data, config, workdir, mesh_and_rules,
                           preemption)
        suite.record(task.name, summary, no_submission=task.no_submission(config))
    label = f"{pretrained.model_config.attention} ({pretrained.model_config.size})"
    suite.write(workdir)
    first = tasks[0]
    metrics.console(first.report(suite, suite.tasks.get(first.name), workdir, label,
                                 pretrained.source))
    metrics.console(first.files_line(workdir, suite, config,
                                     pretrained.model_config.attention))
    return suite.to_json()


def run_grid(task: Task, pretrained: Pretrained, data: TaskData, config, workdir: str,
             mesh_and_rules=None, preemption: PreemptionFlag | None = None
             ) -> results.TaskSummary:
    """Every (learning rate, seed) run of one task, then its summary (the best learning
    rate by the mean main dev score), pruning and the task's own after-grid step."""
    runs = []
    total = len(config.learning_rates) * config.num_seeds
    for lr in config.learning_rates:
        for seed in range(config.num_seeds):
            if preemption is not None and preemption.requested():
                raise Stopped(f"{preemption.signal_name}: stopped before {task.name} "
                              f"lr={lr:g} seed={seed} (finished runs are saved); rerun the "
                              f"same command to continue")
            run_dir = os.path.join(workdir, task.name, results.run_name(lr, seed))
            result = finetune_run(task, pretrained, data, float(lr), seed, config, run_dir,
                                  mesh_and_rules, preemption)
            runs.append(results.RunResult.from_json(result))
            metrics.console(f"{task.name} [{len(runs)}/{total}] lr={lr:g} seed={seed}: "
                            + task.scores_line(result["dev"]))
    summary = results.TaskSummary.from_runs(task, runs, task.baselines(data))
    if config.save_model == "best" and jax.process_index() == 0:
        prune_fine_tuned(task, summary, config, workdir)
    task.after_grid(summary, data, config, workdir)
    return summary


def check_config_has_task_fields(config, tasks: list[Task]) -> None:
    """A config built for one task and pointed at another (--config.task=...) lacks the
    other's fields or carries a protocol meant for another kind of task: refused."""
    for task in tasks:
        missing = [field for field in task.config_fields if field not in config]
        if missing:
            raise ValueError(f"task={config.task}: the config has no {missing[0]} (a field "
                             f"of {task.name}); build it with "
                             f"--config configs/finetune.py:task={task.key}")
    if len({type(task) for task in tasks}) > 1:
        raise ValueError(f"task={config.task}: tasks of different kinds share no config; "
                         f"fine-tune them in separate invocations")


def identity_keys(config) -> set[str]:
    """Config fields the config's tasks bind a workdir to (SQuAD's windows)."""
    return {key for task in registry.resolve(config.task) for key in task.identity_keys}


def check_workdir_identity(workdir: str, pretrained: Pretrained, config) -> None:
    """A fine-tuning workdir belongs to one pretrained model and one protocol."""
    model = pretrained.model_config.to_dict()
    if not model["scan_layers"]:  # unrolled, as every workdir written before the field
        del model["scan_layers"]
    identity = {
        "init": pretrained.source,
        "model": model,
        "max_seq_length": config.max_seq_length, "batch_size": config.batch_size,
        "num_epochs": config.num_epochs, "max_train_examples": config.max_train_examples,
    }
    if config.get("group_by_length"):  # only when set: older workdirs keep their identity
        identity["group_by_length"] = True
    # Only when not threefry (threefry_gpu_kernel draws its bits): older workdirs keep
    # their identity. An unknown one: a ValueError naming the field, before anything runs.
    dropout_prng = steps.dropout_prng_identity(config.get("dropout_prng"))
    if dropout_prng != steps.DEFAULT_DROPOUT_PRNG:
        identity["dropout_prng"] = dropout_prng
    for key in sorted(identity_keys(config)):
        if key in config:
            identity[key] = config[key]
    path = os.path.join(workdir, IDENTITY)
    if os.path.exists(path):
        saved = results.read_json(path)  # a damaged one: ResultsError naming it
        if not isinstance(saved, dict):
            raise ValueError(f"{path}: holds no JSON object; use a new --workdir")
        saved_json = json.dumps(saved, sort_keys=True, default=str)
        if saved_json != json.dumps(identity, sort_keys=True, default=str):
            changed = sorted(k for k in set(identity) | set(saved) if json.dumps(
                saved.get(k), default=str) != json.dumps(identity.get(k), default=str))
            raise ValueError(
                f"{workdir} holds fine-tuning runs of a different setup ({', '.join(changed)} "
                f"changed); use a new --workdir"
            )
        return
    write_json_atomic(path, json.loads(json.dumps(identity, default=str)))
