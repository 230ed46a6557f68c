"""MLM pretraining: everything train.py runs, as importable functions.

Sections follow the run: logging, mesh, input, model and optimizer, sharded
state, steps, checkpoint/resume, loop. The batch for step s is a pure function
of (seed, s), so a restarted run needs only the step stored in its checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

import input_pipeline
from models import BertForMaskedLM, ModelConfig
from models.config import EXECUTION_FIELDS
from models.flops import flop_count
from training import checkpoints, hardware, metrics, sharding, steps
from training.files import write_json_atomic
from training.optimizer import make_optimizer
from training.preemption import PreemptionFlag


class TrainingError(RuntimeError):
    """A run that cannot go on (non-finite loss, mismatched checkpoint); names the cause."""


def validate(config: ml_collections.ConfigDict) -> None:
    """Cheap checks that fail before any data or compilation work."""
    if config.num_train_steps <= 0:
        raise ValueError(f"num_train_steps={config.num_train_steps} must be positive")
    if config.batch_size <= 0:
        raise ValueError(f"batch_size={config.batch_size} must be positive")
    if config.grad_accum_steps <= 0 or config.batch_size % config.grad_accum_steps:
        raise ValueError(
            f"grad_accum_steps={config.grad_accum_steps} must divide batch_size={config.batch_size}"
        )
    if config.nonfinite not in ("error", "skip"):
        raise ValueError(f"nonfinite={config.nonfinite!r} is unknown; choose error or skip")
    if config.data.max_seq_length > config.model.max_position_embeddings:
        raise ValueError(
            f"data.max_seq_length={config.data.max_seq_length} exceeds "
            f"model.max_position_embeddings={config.model.max_position_embeddings}"
        )
    ModelConfig.from_config(config.model)  # raises ConfigError naming the field


def model_config_for(config: ml_collections.ConfigDict, vocab_size: int) -> ModelConfig:
    with config.unlocked():
        config.model.vocab_size = vocab_size
    return ModelConfig.from_config(config.model)


def check_same_architecture(saved: dict[str, Any], current: ModelConfig, path: str) -> None:
    saved_model = saved.get("model", {})
    differs = {
        k: (saved_model.get(k), v) for k, v in current.to_dict().items()
        if k not in EXECUTION_FIELDS
        and saved_model.get(k) != v and not isinstance(v, dict)
    }
    if differs:
        name, (old, new) = next(iter(sorted(differs.items())))
        raise TrainingError(
            f"{path} holds a checkpoint of a different architecture "
            f"(model.{name}: checkpoint {old!r}, config {new!r}); use a new --workdir"
        )


def host_batch_to_global(batch: dict[str, np.ndarray], mesh, rules) -> dict[str, jax.Array]:
    """This process's rows -> one global array per feature, sharded on the batch axis."""
    return {
        k: jax.make_array_from_process_local_data(
            sharding.batch_sharding(mesh, rules, v.ndim), v)
        for k, v in batch.items()
    }


@dataclasses.dataclass
class Compiled:
    abstract_state: Any  # ShapeDtypeStructs carrying their shardings
    state_shardings: Any
    init_fn: Any  # rng -> state, created directly sharded
    train_step: Any  # (state, batch) -> (state, metrics); state donated
    eval_step: Any  # (params, batch) -> sums


def compile_for_mesh(model, optimizer, schedule, config, mesh, rules) -> Compiled:
    """Shapes -> shardings -> jitted init/train/eval functions for this mesh."""
    seq_len, predictions = config.data.max_seq_length, config.data.max_predictions_per_seq

    def init_state(rng):
        ids = jnp.zeros((1, seq_len), jnp.int32)
        params = model.init(rng, ids, ids, ids, jnp.zeros((1, predictions), jnp.int32))["params"]
        return {"step": jnp.zeros((), jnp.int32), "params": params,
                "opt_state": optimizer.init(params)}

    boxed_shapes = jax.eval_shape(init_state, jax.random.key(config.seed))
    state_shardings = sharding.logical_shardings(boxed_shapes, mesh, rules)
    abstract_state = jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
        nn.unbox(boxed_shapes), state_shardings)
    gather = sharding.fsdp_gather(sharding.without_axis(state_shardings["params"]))
    with mesh, nn.logical_axis_rules(rules):
        init_fn = jax.jit(lambda r: nn.unbox(init_state(r)), out_shardings=state_shardings)
        train_step = jax.jit(
            steps.make_train_step(model, optimizer, schedule, config.seed,
                                  config.grad_accum_steps, config.nonfinite == "skip",
                                  prepare_params=gather),
            in_shardings=(state_shardings, None),
            out_shardings=(state_shardings, None),
            donate_argnums=(0,),
        )
        eval_step = jax.jit(steps.make_eval_step(model, gather))
    return Compiled(abstract_state, state_shardings, init_fn, train_step, eval_step)


def build_data(config: ml_collections.ConfigDict, workdir: str):
    """Process 0 builds the tokenizer and packed cache first; the others then read it.

    Tokenizer training is not bit-reproducible across processes, so they must
    share one: on several hosts, point data.cache_dir at a shared filesystem or
    pass a ready data.tokenizer.
    """
    if jax.process_count() == 1:
        return input_pipeline.from_config(config.data, workdir)
    from jax.experimental import multihost_utils

    data = input_pipeline.from_config(config.data, workdir) if jax.process_index() == 0 else None
    multihost_utils.sync_global_devices("input pipeline built by process 0")
    return data or input_pipeline.from_config(config.data, workdir)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, float]:
    """Pretrains (resuming from `workdir` if it holds checkpoints); returns the last eval."""
    validate(config)
    os.makedirs(workdir, exist_ok=True)
    is_main = jax.process_index() == 0

    # -- mesh -----------------------------------------------------------------------
    mesh = sharding.make_mesh(dict(config.mesh))
    rules = sharding.rules_from_config(config.logical_axis_rules)
    divisor = sharding.batch_divisor(mesh, rules)
    if config.batch_size % (divisor * config.grad_accum_steps):
        raise ValueError(
            f"batch_size={config.batch_size} must divide by the batch shards ({divisor}) "
            f"times grad_accum_steps ({config.grad_accum_steps})"
        )
    metrics.console(f"mesh {dict(mesh.shape)} over {jax.device_count()} devices "
                    f"({jax.process_count()} processes)")

    # -- input ----------------------------------------------------------------------
    data = build_data(config, workdir)
    if is_main:
        # The run directory is self-contained: eval_glue.py reads WORKDIR/tokenizer.
        copy_tokenizer(data.tokenizer_dir, os.path.join(workdir, "tokenizer"))
    # Each process builds only its own rows of every global batch.
    shard = {"process_index": jax.process_index(), "process_count": jax.process_count()}
    batcher = data.batcher(config.batch_size, seed=config.seed, **shard)
    # Eval masks use a fixed seed so every run (and every seed) is scored on the same targets.
    eval_batches = data.eval_batches(config.batch_size, config.eval_batches, seed=0, **shard)

    # -- model and optimizer --------------------------------------------------------
    model_cfg = model_config_for(config, data.vocab_size)
    model = BertForMaskedLM(model_cfg)
    optimizer, schedule = make_optimizer(config.optimizer, config.num_train_steps)
    seq_len, predictions = config.data.max_seq_length, config.data.max_predictions_per_seq

    compiled = compile_for_mesh(model, optimizer, schedule, config, mesh, rules)
    abstract_state = compiled.abstract_state
    init_fn, train_step, eval_step = compiled.init_fn, compiled.train_step, compiled.eval_step
    num_params = sum(x.size for x in jax.tree.leaves(abstract_state["params"]))
    metrics.console(f"model {model_cfg.attention}: {num_params / 1e6:.2f}M parameters, "
                    f"vocabulary {data.vocab_size}, {len(data.train.input_ids)} train sequences")

    # -- checkpoint / resume --------------------------------------------------------
    run_config = config.to_dict()
    checkpointer = checkpoints.Checkpointer(
        os.path.join(workdir, "checkpoints"), keep_last=config.keep_checkpoints,
        best_metric="eval_loss")
    if checkpointer.latest_step() is not None:
        check_same_architecture(checkpointer.saved_config(), model_cfg, workdir)
        state, _, start = checkpointer.restore(abstract_state)
        metrics.console(f"resumed from {checkpointer.directory} at step {start}")
    else:
        with mesh, nn.logical_axis_rules(rules):
            state = init_fn(jax.random.key(config.seed))
        start = 0
    if is_main:
        write_json_atomic(os.path.join(workdir, "config.json"), run_config)

    writer = metrics.MetricWriter(workdir)
    if start == 0:
        writer.write_config(run_config)
    progress = metrics.Progress(config.num_train_steps, start)
    flops = flop_count(model_cfg, seq_len)
    step_flops = flops.train_step(config.batch_size * seq_len, config.batch_size * predictions)
    peak = config.peak_flops_per_device or hardware.peak_flops_per_device()
    tokens_per_step = config.batch_size * seq_len

    def evaluate() -> dict[str, float]:
        totals = {"loss_sum": 0.0, "correct": 0.0, "weight": 0.0}
        with mesh, nn.logical_axis_rules(rules):
            for i in range(len(eval_batches)):
                batch = host_batch_to_global(eval_batches.batch(i), mesh, rules)
                sums = jax.device_get(eval_step(state["params"], batch))
                totals = {k: totals[k] + float(sums[k]) for k in totals}
        loss = totals["loss_sum"] / max(totals["weight"], 1.0)
        return {"eval_loss": loss, "eval_accuracy": totals["correct"] / max(totals["weight"], 1),
                "eval_perplexity": float(np.exp(min(loss, 50.0)))}

    # -- loop -----------------------------------------------------------------------
    last_eval: dict[str, float] = {}
    window_start, window_steps, paused = time.time(), 0, 0.0
    end = config.num_train_steps
    if config.stop_after_steps is not None:
        end = min(end, config.stop_after_steps)
    preempted = False
    with PreemptionFlag() as preemption:
        for step in range(start, end):
            batch = host_batch_to_global(batcher.batch(step), mesh, rules)
            with mesh, nn.logical_axis_rules(rules):
                state, step_metrics = train_step(state, batch)
            window_steps += 1
            done = step + 1
            last = done == end
            if done % config.log_every_steps == 0 or last or config.nonfinite == "error":
                m = jax.device_get(step_metrics)
                if not bool(m["finite"]) and config.nonfinite == "error":
                    raise TrainingError(
                        f"non-finite loss or gradient at step {done} (loss_sum={m['loss_sum']}, "
                        f"grad_norm={m['grad_norm']}); not checkpointed. Lower the learning rate "
                        f"or set --config.nonfinite=skip"
                    )
            if done % config.log_every_steps == 0 or last:
                step_time = (time.time() - window_start - paused) / window_steps
                values = {
                    **train_scalars(m),
                    "step_time_s": step_time,
                    "tokens_per_s": tokens_per_step / step_time,
                    "mfu": step_flops / step_time / (peak * jax.device_count()),
                    "epoch": batcher.epoch(done),
                }
                writer.scalars(done, values)
                progress.log(done, {k: values[k] for k in ("loss", "mlm_accuracy", "learning_rate",
                                                            "tokens_per_s", "mfu")})
                window_start, window_steps, paused = time.time(), 0, 0.0
            pause_start = time.time()  # eval and checkpoint time is not training throughput
            evaluated = done % config.eval_every_steps == 0 or last
            if evaluated:
                last_eval = evaluate()
                writer.scalars(done, last_eval)
                metrics.console(f"eval at step {done}: "
                                + " ".join(f"{k}={v:.4f}" for k, v in last_eval.items()))
            preempted = preemption.requested()
            if done % config.checkpoint_every_steps == 0 or last or preempted:
                scores = {"eval_loss": last_eval["eval_loss"]} if evaluated else None
                checkpointer.save(done, state, run_config, metrics=scores)
            writer.flush()
            paused += time.time() - pause_start
            if preempted:
                metrics.console(f"{preemption.signal_name}: saved step {done}; rerun the same "
                                f"command to continue")
                break
    if is_main and last_eval and end == config.num_train_steps and not preempted:
        write_json_atomic(os.path.join(workdir, "final_metrics.json"),
                          {"step": config.num_train_steps, **last_eval})
    writer.close()
    checkpointer.close()
    return last_eval


def train_scalars(m: dict[str, Any]) -> dict[str, float]:
    """Per-step scalars from the step's sums (loss and accuracy over its real targets)."""
    weight = max(float(m["weight"]), 1.0)
    return {
        "loss": float(m["loss_sum"]) / weight,
        "mlm_accuracy": float(m["correct"]) / weight,
        "learning_rate": float(m["learning_rate"]),
        "grad_norm": float(m["grad_norm"]),
        "param_norm": float(m["param_norm"]),
        "skipped_nonfinite": 0.0 if bool(m["finite"]) else 1.0,
    }


def copy_tokenizer(source: os.PathLike | str, target: str) -> None:
    os.makedirs(target, exist_ok=True)
    for name in ("tokenizer.json", "vocab.txt"):
        path = os.path.join(source, name)
        if os.path.exists(path):
            tmp = os.path.join(target, f".{name}.tmp")
            shutil.copyfile(path, tmp)
            os.replace(tmp, os.path.join(target, name))
