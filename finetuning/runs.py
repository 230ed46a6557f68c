"""One fine-tuning run: (task, learning rate, seed) on the mesh, task-neutral.

Pretraining's sharded state, optimizer builder and train step (training/steps.py) with
the task's head, objective, predictions and scores (finetuning/task.py). A finished run
leaves RUN_DIR/result.json (written atomically; a rerun reads it and never redoes or
overwrites it); a signal saves the run's state and the rerun continues from it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from finetuning.batching import batches, epoch_order, length_buckets, on_mesh, predict_split
from finetuning.pretrained import Pretrained
from finetuning.task import Task, TaskData
from training import checkpoints, metrics, results, sharding, steps
from training.cli import Stopped
from training.optimizer import make_optimizer
from training.preemption import PreemptionFlag

SAVE_MODEL = ("best", "all", "none")  # config.save_model
FINE_TUNED_MODEL = results.FINE_TUNED_MODEL  # TASK/lr{LR}_seed{S}/model/


def make_mesh(config, devices=None):
    """The fine-tuning mesh and rules (config.mesh, config.logical_axis_rules): data
    parallel over every device by default; `fsdp` shards a large row's parameters."""
    mesh = sharding.make_mesh(dict(config.mesh), devices)
    rules = sharding.rules_from_config(config.logical_axis_rules)
    divisor = sharding.batch_divisor(mesh, rules)
    for name in ("batch_size", "eval_batch_size"):
        if config[name] % divisor:
            raise ValueError(f"{name}={config[name]} must divide by the batch shards "
                             f"({divisor}) of mesh {dict(mesh.shape)}")
    return mesh, rules


def finetune_run(task: Task, pretrained: Pretrained, data: TaskData,
                 learning_rate: float, seed: int, config, run_dir: str, mesh_and_rules=None,
                 preemption: PreemptionFlag | None = None) -> dict[str, Any]:
    """One (task, lr, seed) run on the mesh, with pretraining's sharded state, optimizer
    builder and train step (training/steps.py) and the task's head and objective.

    A SIGTERM/SIGINT (`preemption`: the invocation's flag; None: this run's own) at any
    moment, training or evaluating, saves the run's state and raises Stopped; the rerun
    continues from it (after training, only the evaluation is redone)."""
    done = results.RunResult.read(run_dir)
    if done is not None:
        return done.to_json()  # finished earlier: never redone, never overwritten
    if preemption is None:
        with PreemptionFlag() as flag:
            return finetune_run(task, pretrained, data, learning_rate, seed, config, run_dir,
                                mesh_and_rules, flag)
    mesh, rules = mesh_and_rules or make_mesh(config)
    os.makedirs(run_dir, exist_ok=True)
    run = compile_run(task, pretrained, data.num_train, learning_rate, seed, config, run_dir,
                      mesh, rules, preemption)
    state = restore_or_init_run(run)
    # A line per logged step, as train.py's: fine-tuning a large task takes minutes.
    state.progress = metrics.Progress(
        run.total_steps, state.start, f"{run.task.name} lr={learning_rate:g} seed={seed}: ",
        examples_per_step=config.batch_size)
    writer = metrics.MetricWriter(run_dir)
    try:
        train_epochs(run, state, data["train"], writer)
        dev = evaluate_run(run, state, data, writer)
        run.stop_if_requested(state, "writing the result")
    finally:
        writer.close()
        run.checkpointer.close()
    return finish_run(run, state, dev)


@dataclasses.dataclass(frozen=True)
class FineTuneRun:
    """What one (task, lr, seed) run reads: its recipe, compiled steps, files and flag."""

    task: Task
    pretrained: Pretrained
    learning_rate: float
    seed: int
    config: Any
    run_dir: str
    mesh: Any
    rules: Any
    total_steps: int
    buckets: tuple[int, ...]
    sharded: sharding.ShardedState
    init_key: Any
    train_step: Any
    predict: Any
    checkpointer: checkpoints.Checkpointer
    preemption: PreemptionFlag

    @property
    def dropout_seed(self) -> np.int32:
        """The seed of the dropout keys, key(seed + 1): apart from the init key."""
        return np.int32(self.seed + 1)

    def stop_if_requested(self, state: FineTuneState, during: str) -> None:
        """Saves this step's state (once) and stops, when a signal asked for it."""
        if not self.preemption.requested():
            return
        if self.checkpointer.latest_step() != state.step:
            self.checkpointer.save(state.step, state.train_state, {
                "task": self.task.name, "lr": self.learning_rate, "seed": self.seed,
                "final_train_loss": state.losses[-1] if state.losses else None})
        raise Stopped(f"{self.preemption.signal_name}: saved {self.task.name} "
                      f"lr={self.learning_rate:g} seed={self.seed} at step {state.step} "
                      f"({during}); rerun the same command to continue")


@dataclasses.dataclass
class FineTuneState:
    """What a run changes: its train state, the step reached, the logged losses."""

    train_state: Any
    start: int  # the step a preempted run resumes from (0: a fresh run)
    step: int = 0
    losses: list[float] = dataclasses.field(default_factory=list)
    progress: metrics.Progress | None = None  # the console's progress lines


def compile_run(task: Task, pretrained: Pretrained, num_train: int, learning_rate: float,
                seed: int, config, run_dir: str, mesh, rules,
                preemption: PreemptionFlag) -> FineTuneRun:
    model = task.model(pretrained.model_config)
    steps_per_epoch = math.ceil(num_train / config.batch_size)
    total_steps = max(int(math.ceil(steps_per_epoch * config.num_epochs)), 1)
    # BERT's fine-tuning recipe through pretraining's optimizer builder: AdamW, clipping
    # at 1.0, linear warm-up over warmup_fraction of the steps, then linear decay to 0.
    optimizer, schedule = make_optimizer(ml_collections.ConfigDict(dict(
        name="adamw", learning_rate=learning_rate, schedule="linear",
        warmup_steps=int(config.warmup_fraction * total_steps), b1=0.9, b2=0.999, eps=1e-6,
        weight_decay=config.weight_decay, grad_clip_norm=1.0)), total_steps)

    def init_state(rng):
        ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
        params = model.init(rng, ids, ids, ids)["params"]
        return {"step": jnp.zeros((), jnp.int32), "params": params,
                "opt_state": optimizer.init(params)}

    init_key = jax.random.key(seed)
    if pretrained.bert_params is None:  # init=scratch: one stream per pretraining seed
        init_key = jax.random.fold_in(init_key, pretrained.init_stream)
    sharded = sharding.ShardedState(init_state, mesh, rules, init_key)
    # The dropout seed (FineTuneRun.dropout_seed) travels with each batch (train_epochs),
    # so the grid's runs at one rate compile one step: the persistent compilation cache
    # serves every seed after the first.
    train_step = sharded.jit_step(steps.make_train_step(
        model, optimizer, schedule, None, prepare_params=sharded.gather,
        objective=task.objective(),
        dropout_prng=config.get("dropout_prng", steps.DEFAULT_DROPOUT_PRNG)))
    with mesh, nn.logical_axis_rules(rules):
        predict = jax.jit(task.predict_step(model, sharded.gather))
    checkpointer = checkpoints.Checkpointer(os.path.join(run_dir, "checkpoints"), keep_last=1)
    return FineTuneRun(task, pretrained, learning_rate, seed, config, run_dir, mesh, rules,
                       total_steps, length_buckets(config.length_buckets, config.max_seq_length),
                       sharded, init_key, train_step, predict, checkpointer, preemption)


def restore_or_init_run(run: FineTuneRun) -> FineTuneState:
    """A preempted run left a checkpoint: continue from its step (same batches, same
    dropout keys, since both are functions of (seed, step))."""
    if run.checkpointer.latest_step() is not None:
        train_state, saved, start = run.checkpointer.restore(run.sharded.abstract)
        state = FineTuneState(train_state, start)
        if saved.get("final_train_loss") is not None:  # stopped after its last log step
            state.losses.append(float(saved["final_train_loss"]))
        return state
    with run.mesh, nn.logical_axis_rules(run.rules):
        train_state = run.sharded.init(run.init_key)
    if run.pretrained.bert_params is not None:  # init=scratch keeps the fresh encoder
        train_state["params"] = with_pretrained_encoder(
            train_state["params"], run.pretrained.bert_params, run.sharded.shardings["params"])
    return FineTuneState(train_state, 0)


def train_epochs(run: FineTuneRun, state: FineTuneState, train: dict[str, np.ndarray],
                 writer: metrics.MetricWriter) -> None:
    """Every step to total_steps, skipping (without computing) those a resume has done."""
    config = run.config
    for epoch in range(math.ceil(config.num_epochs)):
        order = epoch_order(train["attention_mask"].sum(axis=1), run.seed, epoch,
                            config.batch_size, config.group_by_length)
        for batch in batches(train, order, config.batch_size, run.buckets,
                             run.task.label_keys):
            if state.step >= run.total_steps:
                break
            if state.step < state.start:
                state.step += 1
                continue
            with run.mesh, nn.logical_axis_rules(run.rules):
                state.train_state, step_metrics = run.train_step(
                    state.train_state, {**on_mesh(batch, run.mesh, run.rules),
                                        steps.DROPOUT_SEED: run.dropout_seed})
            state.step += 1
            if state.step % config.log_every_steps == 0 or state.step == run.total_steps:
                log_train_step(run, state, step_metrics, writer)
            run.stop_if_requested(state, "training")


def log_train_step(run: FineTuneRun, state: FineTuneState, step_metrics: Any,
                   writer: metrics.MetricWriter) -> None:
    m = jax.device_get(step_metrics)
    loss = float(m["loss_sum"]) / max(float(m["weight"]), 1.0)
    if not bool(m["finite"]):
        raise RuntimeError(f"{run.task.name} lr={run.learning_rate} seed={run.seed}: "
                           f"non-finite loss at step {state.step}")
    state.losses.append(loss)
    writer.scalars(state.step, {"train_loss": loss, "learning_rate": float(m["learning_rate"])})
    if state.progress is not None:
        state.progress.log(state.step, {"loss": loss})


def evaluate_run(run: FineTuneRun, state: FineTuneState, data, writer: metrics.MetricWriter
                 ) -> dict[str, dict[str, float]]:
    """Dev scores per split, and test predictions; process 0 keeps every split's scores in
    RUN_DIR/SPLIT_predictions.npy (dev ones too: per-example comparisons of runs)."""
    params, task = state.train_state["params"], run.task

    def predictions_of(split: str) -> np.ndarray:
        """Every process scores (the batches span them)."""
        scores = predict_split(run.predict, params, data[split], run.config.eval_batch_size,
                               run.mesh, run.rules, run.buckets, task.label_keys)
        if jax.process_index() == 0 and task.save_scores:
            np.save(os.path.join(run.run_dir, f"{split}_predictions.npy"), scores)
        return scores

    dev = {}
    for split in task.dev_splits:
        run.stop_if_requested(state, f"evaluating {split}")
        dev[split] = task.score(data, split, predictions_of(split), run.run_dir)
        writer.scalars(state.step, {f"{split}/{k}": v for k, v in dev[split].items()})
    for split in task.test_splits:
        run.stop_if_requested(state, f"predicting {split}")
        if split in data:
            predictions_of(split)
    return dev


def finish_run(run: FineTuneRun, state: FineTuneState, dev: dict[str, dict[str, float]]
               ) -> dict[str, Any]:
    task = run.task
    if run.config.save_model != "none":  # before result.json: a finished run has its model
        save_fine_tuned(run.run_dir, state.step, state.train_state["params"], run.pretrained,
                        task, run.learning_rate, run.seed)
    result = results.RunResult(
        task=task.name, learning_rate=run.learning_rate, seed=run.seed, steps=state.step,
        dev=dev, main=float(np.mean([m[task.main_metric] for m in dev.values()])),
        final_train_loss=state.losses[-1] if state.losses else None)
    if jax.process_index() == 0:
        result.write(run.run_dir)
        # Finished: the result is final, the mid-run checkpoint is no longer needed.
        shutil.rmtree(os.path.join(run.run_dir, "checkpoints"), ignore_errors=True)
    return result.to_json()


def save_fine_tuned(run_dir: str, step: int, params: Any, pretrained: Pretrained,
                    task: Task, learning_rate: float, seed: int) -> None:
    """RUN_DIR/model/: the fine-tuned parameters and what an export needs to read them (the
    model's config, the task); a verified checkpoint as pretraining's."""
    directory = os.path.join(run_dir, FINE_TUNED_MODEL)
    # Left by a run killed before its result.json: the rerun trained the same parameters.
    if jax.process_index() == 0:
        shutil.rmtree(directory, ignore_errors=True)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"{directory} cleared")
    checkpointer = checkpoints.Checkpointer(directory, keep_last=1)
    try:
        checkpointer.save(step, {"params": params}, {
            "model": pretrained.model_config.to_dict(), "task": task.name,
            "learning_rate": learning_rate, "seed": seed, "init": pretrained.source})
    finally:
        checkpointer.close()


def prune_fine_tuned(task: Task, summary: results.TaskSummary, config,
                     workdir: str) -> None:
    """save_model=best: removes the fine-tuned models of every run but the best one."""
    best = results.run_name(summary.best_learning_rate, summary.best_run)
    for lr in config.learning_rates:
        for seed in range(config.num_seeds):
            name = results.run_name(lr, seed)
            if name != best:
                shutil.rmtree(os.path.join(workdir, task.name, name, FINE_TUNED_MODEL),
                              ignore_errors=True)
    if not os.path.isdir(os.path.join(workdir, task.name, best, FINE_TUNED_MODEL)):
        metrics.console(f"warning: the best {task.name} run ({best}) has no saved model "
                        f"(fine-tuned with save_model=none, or pruned when it was not the "
                        f"best); scripts/export_hf.py cannot export it")


def with_pretrained_encoder(params: dict[str, Any], bert: dict[str, Any],
                            shardings: dict[str, Any]) -> dict[str, Any]:
    """Fresh params with the pretrained encoder in, laid out as `shardings`; the
    classifier (and a pooler the checkpoint lacks) stay as initialised."""
    encoder = flax.traverse_util.flatten_dict({"bert": bert}, sep="/")
    return sharding.with_values(params, encoder, shardings)

