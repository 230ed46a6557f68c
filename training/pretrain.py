"""MLM pretraining: everything train.py runs, as importable functions.

`_train_and_evaluate` reads as the run: the mesh; resume or start (decided before any
data is built or file written); the token ids; the model and its compiled steps; the
state, restored or initialised; the run's files; the input; the step loop
(training/pretrain_loop.py); the final record. The batch for step s is a pure function
of (seed, s), so a restarted run needs only the step stored in its checkpoint; the
checks a resume makes are training/resume.py's.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

import input_pipeline
from common.files import copy_file_atomic, write_json_atomic
from models import BertForMaskedLM, ModelConfig
from models.config import describe_attention
from models.flops import flop_count
from models.hf_export import EXPORTABLE_ATTENTION
from training import (
    checkpoints,
    hardware,
    metrics,
    results,
    run_environment,
    sharding,
    steps,
    warm_start,
)
from training import workdir as workdir_lib
from training.cli import Stopped
from training.optimizer import make_optimizer
from training.preemption import PreemptionFlag
from training.pretrain_loop import (
    Evaluator,
    LoopState,
    NonFiniteStep,
    StepLoop,
    Throughput,
    TrainingError,
    Window,
    evaluate_and_report,
    final_record,
    run_steps,
)
from training.resume import (
    UNSAVED_IDENTITY_FIELDS,
    check_same_architecture,
    check_same_data,
    check_same_dropout_prng,
    check_schedule,
    data_identity,
)
from training.workdir import WorkdirLock


def validate(config: ml_collections.ConfigDict, warm: bool = False) -> None:
    """Cheap checks that fail before any data or compilation work; `warm`: the model comes
    from init_from (training/warm_start.py checks its positions)."""
    if config.num_train_steps <= 0:
        raise ValueError(f"num_train_steps={config.num_train_steps} must be positive")
    if config.batch_size <= 0:
        raise ValueError(f"batch_size={config.batch_size} must be positive")
    if config.grad_accum_steps <= 0 or config.batch_size % config.grad_accum_steps:
        raise ValueError(
            f"grad_accum_steps={config.grad_accum_steps} must divide batch_size={config.batch_size}"
        )
    for name in ("log_every_steps", "eval_every_steps", "checkpoint_every_steps",
                 "keep_checkpoints"):
        if not isinstance(config[name], int) or config[name] <= 0:
            raise ValueError(f"{name}={config[name]!r} must be a positive integer")
    if config.eval_batches < 0:
        raise ValueError(f"eval_batches={config.eval_batches} must be >= 0")
    if config.data.masking not in ("device", "host"):
        raise ValueError(f"data.masking={config.data.masking!r} is unknown; choose device or "
                         f"host")
    if config.nonfinite not in ("error", "skip"):
        raise ValueError(f"nonfinite={config.nonfinite!r} is unknown; choose error or skip")
    steps.dropout_prng_identity(config.get("dropout_prng"))  # an unknown one: ValueError
    if config.init_from_step is not None and not config.init_from:
        raise ValueError("init_from_step is set but init_from is not")
    make_optimizer(config.optimizer, config.num_train_steps)  # OptimizerError naming the field
    if not warm:
        check_positions(config)
        ModelConfig.from_config(config.model)  # raises ConfigError naming the field


def check_positions(config: ml_collections.ConfigDict) -> None:
    if config.data.max_seq_length > config.model.max_position_embeddings:
        raise ValueError(
            f"data.max_seq_length={config.data.max_seq_length} exceeds "
            f"model.max_position_embeddings={config.model.max_position_embeddings}"
        )


def model_config_for(config: ml_collections.ConfigDict, vocab_size: int) -> ModelConfig:
    with config.unlocked():
        config.model.vocab_size = vocab_size
    return ModelConfig.from_config(config.model)


@dataclasses.dataclass
class Compiled:
    abstract_state: Any  # ShapeDtypeStructs carrying their shardings
    state_shardings: Any
    init_fn: Any  # rng -> state, created directly sharded
    train_step: Any  # (state, batch) -> (state, metrics); state donated
    eval_step: Any  # (params, batch) -> sums
    objective: Any  # both steps' (training/steps.py): their sums and what those become


def compile_for_mesh(model, optimizer, schedule, config, mesh, rules,
                     masker=None) -> Compiled:
    """Shapes -> shardings -> jitted init/train/eval functions for this mesh; `masker`:
    a DeviceMasker run inside the steps (None: batches arrive masked)."""
    seq_len, predictions = config.data.max_seq_length, config.data.max_predictions_per_seq

    def init_state(rng):
        ids = jnp.zeros((1, seq_len), jnp.int32)
        params = model.init(rng, ids, ids, ids, jnp.zeros((1, predictions), jnp.int32))["params"]
        return {"step": jnp.zeros((), jnp.int32), "params": params,
                "opt_state": optimizer.init(params)}

    state = sharding.ShardedState(init_state, mesh, rules, jax.random.key(config.seed))
    objective = steps.MLMObjective()
    train_step = state.jit_step(steps.make_train_step(
        model, optimizer, schedule, config.seed, config.grad_accum_steps,
        config.nonfinite == "skip", prepare_params=state.gather, masker=masker,
        objective=objective,
        dropout_prng=config.get("dropout_prng", steps.DEFAULT_DROPOUT_PRNG)))
    with mesh, nn.logical_axis_rules(rules):
        eval_step = jax.jit(steps.make_eval_step(model, state.gather, masker, objective))
    return Compiled(state.abstract, state.shardings, state.init, train_step, eval_step,
                    objective)


def build_data(data_config: ml_collections.ConfigDict, workdir: str,
               corpus_identity: str | None = None):
    """Process 0 builds the tokenizer and packed cache first; the others then read it.

    Every process would build the same tokenizer and cache (train_tokenizer is
    reproducible), but once is enough: on several hosts, point data.cache_dir at a
    shared filesystem (or pass a ready data.tokenizer) and the others only read it.
    """
    def build():
        return input_pipeline.from_config(data_config, workdir, corpus_identity)

    if jax.process_count() == 1:
        return build()
    from jax.experimental import multihost_utils

    data = build() if jax.process_index() == 0 else None
    multihost_utils.sync_global_devices("input pipeline built by process 0")
    return data or build()


def check_batch_fits_mesh(config: ml_collections.ConfigDict, mesh, rules) -> None:
    divisor = sharding.batch_divisor(mesh, rules)
    if config.batch_size % (divisor * config.grad_accum_steps):
        raise ValueError(
            f"batch_size={config.batch_size} must divide by the batch shards ({divisor}) "
            f"times grad_accum_steps ({config.grad_accum_steps})"
        )


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, float]:
    """Pretrains (resuming from `workdir` if it holds checkpoints); returns the final
    metrics. Raises training.cli.Stopped when a signal stopped the run after saving it."""
    # A copy: a warm start (and a resume of one) sets the model and tokenizer fields.
    config = copy.deepcopy(config)
    # A warm start's architecture (positions included) is its source's, checked once known.
    validate(config, warm=bool(config.init_from) or os.path.exists(
        os.path.join(workdir, warm_start.RECORD)))
    with workdir_lib.started(workdir), WorkdirLock(workdir):  # a live workdir: refused here
        return _train_and_evaluate(config, workdir)


def _train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, float]:
    began = time.time()
    mesh, rules = run_mesh(config)
    plan = plan_start(config, workdir)
    tokens = read_tokens(plan, config, workdir)
    model_cfg, compiled = build_model(config, tokens.tokenizer, mesh, rules)
    run = Run(config, workdir, mesh, rules, plan, model_cfg, compiled, tokens.identity,
              run_config=config.to_dict())
    train_state, saved, start = restore_or_init(run)
    # The resume check hashed the corpus already: the cache key reuses that identity.
    data = tokens.data or build_data(tokens.data_config, workdir,
                                     tokens.identity.get("corpus_identity"))
    announce(run, data)
    end = config.num_train_steps
    if config.stop_after_steps is not None:
        end = min(end, config.stop_after_steps)
    if start >= end:
        # Nothing to train: leave every file as it is, and say where the run stands.
        plan.checkpointer.close()
        return nothing_to_train(workdir, start, config)
    if plan.resuming:
        check_schedule(saved, config, start, workdir)
    write_run_files(run, data, start)
    return train(run, data, train_state, start, end, began)


# -- the mesh ------------------------------------------------------------------------------
def run_mesh(config: ml_collections.ConfigDict):
    mesh = sharding.make_mesh(dict(config.mesh))
    rules = sharding.rules_from_config(config.logical_axis_rules)
    check_batch_fits_mesh(config, mesh, rules)
    metrics.console(f"mesh {dict(mesh.shape)} over {jax.device_count()} devices "
                    f"({jax.process_count()} processes)")
    return mesh, rules


# -- resume or start -------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class StartPlan:
    """Resume or start, decided before any data is built or file written."""

    checkpointer: checkpoints.Checkpointer
    resuming: bool
    warm_resume: bool  # resuming a run that was warm-started
    source: Any  # a warm start's source (training/warm_start.py), read before anything is written
    run_tokenizer: str  # WORKDIR/tokenizer


def plan_start(config: ml_collections.ConfigDict, workdir: str) -> StartPlan:
    checkpointer = checkpoints.Checkpointer(
        os.path.join(workdir, "checkpoints"), keep_last=config.keep_checkpoints,
        best_metric="eval_loss")
    resuming = checkpointer.latest_step() is not None
    source = None
    warm_resume = resuming and warm_start.resume(config, workdir) is not None
    if warm_resume:
        check_positions(config)
    elif config.init_from and not resuming:
        source = warm_start.start(config)
    return StartPlan(checkpointer, resuming, warm_resume, source,
                     os.path.join(workdir, "tokenizer"))


# -- the token ids ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Tokens:
    """What the run's token ids mean: its tokenizer and data identity; `data` is built
    when starting (a resume builds it once its checkpoint is checked)."""

    data_config: ml_collections.ConfigDict
    identity: dict[str, str]
    tokenizer: Any
    data: Any = None


def read_tokens(plan: StartPlan, config: ml_collections.ConfigDict, workdir: str) -> Tokens:
    if not plan.resuming:
        data = build_data(config.data, workdir)
        identity = {"corpus": data.meta["corpus"],
                    "corpus_identity": data.meta["corpus_identity"],
                    "tokenizer_hash": data.meta["tokenizer_hash"]}
        return Tokens(config.data, identity, data.tokenizer, data)
    # The checkpoints' token ids mean what the run's own tokenizer says: never retrain
    # (or replace) it on resume. A warm start's is its source's, copied in.
    data_config = ml_collections.ConfigDict(config.data.to_dict())
    data_config.tokenizer = (plan.run_tokenizer if plan.warm_resume
                             else config.data.tokenizer or plan.run_tokenizer)
    if not os.path.exists(data_config.tokenizer):
        raise TrainingError(f"{plan.run_tokenizer} is missing, so the checkpoints' token ids "
                            f"cannot be read; pass --config.data.tokenizer or use a new "
                            f"--workdir")
    identity = {**data_identity(data_config, data_config.tokenizer),
                "tokenizer_dir": data_config.tokenizer}
    tokenizer = input_pipeline.load_tokenizer(data_config.tokenizer,
                                              lowercase=data_config.lowercase)
    return Tokens(data_config, identity, tokenizer)


# -- the model and its compiled steps --------------------------------------------------------
def build_model(config: ml_collections.ConfigDict, tokenizer: Any, mesh, rules
                ) -> tuple[ModelConfig, Compiled]:
    model_cfg = model_config_for(config, input_pipeline.tokenizer.vocab_bound(tokenizer))
    optimizer, schedule = make_optimizer(config.optimizer, config.num_train_steps)
    masker = None
    if config.data.masking == "device":
        from input_pipeline.device_masking import DeviceMasker

        data = config.data
        masker = DeviceMasker.for_tokenizer(
            tokenizer, data.max_predictions_per_seq, data.mask_prob, data.whole_word_mask,
            mask_targets=data.mask_targets, mask_token_prob=data.mask_token_prob,
            random_token_prob=data.random_token_prob)
    compiled = compile_for_mesh(BertForMaskedLM(model_cfg), optimizer, schedule, config, mesh,
                                rules, masker)
    return model_cfg, compiled


# -- the state: restored or initialised ------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Run:
    """What the rest of a run reads: its config, workdir, mesh, start plan, model."""

    config: ml_collections.ConfigDict
    workdir: str
    mesh: Any
    rules: Any
    plan: StartPlan
    model_cfg: ModelConfig
    compiled: Compiled
    identity: dict[str, str]
    run_config: dict[str, Any]  # the config as run (config.json, TensorBoard)

    @property
    def checkpoint_config(self) -> dict[str, Any]:
        """The checkpoint carries what its token ids mean, for the next resume to check."""
        return {**self.run_config, "data_identity": {
            k: v for k, v in self.identity.items() if k not in UNSAVED_IDENTITY_FIELDS}}


def restore_or_init(run: Run) -> tuple[Any, dict[str, Any] | None, int]:
    """(state, the checkpoint's config or None, its step)."""
    plan, compiled = run.plan, run.compiled
    if plan.resuming:
        def refuse_another_run(saved: dict[str, Any]) -> None:
            check_same_architecture(saved, run.model_cfg, run.workdir)
            check_same_data(saved, run.identity, run.config.data, run.workdir)
            check_same_dropout_prng(saved, run.config, run.workdir)

        state, saved, start = plan.checkpointer.restore(compiled.abstract_state,
                                                        check_config=refuse_another_run)
        metrics.console(f"resumed from {plan.checkpointer.directory} at step {start}")
        return state, saved, start
    with run.mesh, nn.logical_axis_rules(run.rules):
        state = compiled.init_fn(jax.random.key(run.config.seed))
    if plan.source is not None:  # fresh optimizer state and schedule, the source's weights
        state["params"] = warm_start.with_source(state["params"], plan.source,
                                                 compiled.state_shardings["params"])
    return state, None, 0


def announce(run: Run, data: Any) -> None:
    stale = results.FinalMetrics.set_aside_if_stale(run.workdir) if is_main() else None
    if stale:
        metrics.console(f"warning: final_metrics.json reported a checkpoint that is gone "
                        f"(deleted, or set aside as damaged); moved to {stale}: the run is "
                        f"not finished")
    num_params = sum(x.size for x in jax.tree.leaves(run.compiled.abstract_state["params"]))
    metrics.console(f"model {describe_attention(run.model_cfg)}: {num_params / 1e6:.2f}M "
                    f"parameters, vocabulary {data.vocab_size}, {len(data.train)} train "
                    f"sequences")


# -- the run's files -------------------------------------------------------------------------
def write_run_files(run: Run, data: Any, start: int) -> None:
    if not is_main():
        return
    for warning in run_environment.record_start(run.workdir, start):
        metrics.console(warning)
    if not run.plan.resuming:
        # The run directory is self-contained: eval_glue.py reads WORKDIR/tokenizer.
        copy_tokenizer(data.tokenizer_dir, run.plan.run_tokenizer)
        warm_start.record(run.workdir, run.config, run.plan.source)  # what a resume reads
    write_json_atomic(os.path.join(run.workdir, "config.json"), run.run_config)


# -- the input -------------------------------------------------------------------------------
def make_input(run: Run, data: Any) -> tuple[Any, Evaluator]:
    """(the train batcher, the evaluator); each process builds only its own rows of every
    global batch. Eval masks use a fixed seed so every run (and every seed) is scored on
    the same targets."""
    config = run.config
    shard = {"process_index": jax.process_index(), "process_count": jax.process_count()}
    on_device = config.data.masking == "device"
    batcher = data.batcher(config.batch_size, seed=config.seed, on_device=on_device, **shard)
    eval_batches = None
    if len(data.eval) > 0 and config.eval_batches > 0:
        eval_batches = data.eval_batches(config.batch_size, config.eval_batches, seed=0,
                                         on_device=on_device, **shard)
    else:
        metrics.console("warning: no held-out eval (the eval split is empty or "
                        "eval_batches=0): no eval metrics are reported and checkpoints are "
                        "kept by step only")
    return batcher, Evaluator(run.compiled.eval_step, eval_batches, run.mesh, run.rules,
                              run.compiled.objective)


def throughput(run: Run) -> Throughput:
    config = run.config
    seq_len = config.data.max_seq_length
    tokens = config.batch_size * seq_len
    step_flops = flop_count(run.model_cfg, seq_len).train_step(
        tokens, config.batch_size * config.data.max_predictions_per_seq)
    peak = config.peak_flops_per_device or hardware.peak_flops_per_device()
    return Throughput(tokens, step_flops, peak * jax.device_count())


# -- the loop and the final record -----------------------------------------------------------
def train(run: Run, data: Any, train_state: Any, start: int, end: int, began: float
          ) -> dict[str, float]:
    config, workdir, checkpointer = run.config, run.workdir, run.plan.checkpointer
    batcher, evaluator = make_input(run, data)
    writer = metrics.MetricWriter(workdir)
    if start == 0:
        writer.write_config(run.run_config)
    state = LoopState(train_state, steps.initial_health(), Window(start=time.time()))
    if run.plan.source is not None:  # where the warm start begins, on this run's batches
        evaluate_and_report(evaluator, writer, state, 0, f" ({run.plan.source.description})")
    first_line = min(end, (start // config.log_every_steps + 1) * config.log_every_steps)
    metrics.console(f"compiling the train step; the first line comes at step {first_line}")
    progress = metrics.Progress(config.num_train_steps, start)
    # A record of an earlier attempt's divergence no longer says what this run does; if
    # the steps are the same it diverges again and writes it again.
    if is_main() and os.path.exists(results.Diverged.path(workdir)):
        os.remove(results.Diverged.path(workdir))
    try:
        with PreemptionFlag() as preemption:
            loop = StepLoop(config, run.mesh, run.rules, run.compiled.train_step,
                            run.compiled.objective, batcher, evaluator, writer, progress,
                            throughput(run), checkpointer, run.checkpoint_config,
                            preemption)
            try:
                run_steps(loop, state, start, end)
            except NonFiniteStep as e:
                if is_main():  # a rate grid reads it as a finished run with the worst loss
                    results.Diverged(e.step, e.seen_at).write(workdir)
                raise
        final = final_record(loop, state, end)
        finished = end == config.num_train_steps
        if is_main() and finished and not state.preempted:
            final.write(workdir)
        checkpointer.wait()  # the last save's metrics, for the summary's best step
        best = checkpointer.best_step("eval_loss")
    finally:
        writer.close()
        checkpointer.close()
    if state.preempted:
        raise Stopped(f"{preemption.signal_name}: saved step {state.done}; rerun the same "
                      f"command to continue")
    metrics.console(end_of_run(workdir, final, config, start, time.time() - began, best,
                               finished))
    return final.to_json()


def is_main() -> bool:
    return jax.process_index() == 0


def end_of_run(workdir: str, final: results.FinalMetrics, config: ml_collections.ConfigDict,
               start: int, seconds: float, best: int | None, finished: bool) -> str:
    """The lines a finished invocation ends on: where it stands, its numbers, where its
    files are, and what to run next."""
    workdir = os.path.normpath(workdir)
    wall = time.strftime("%H:%M:%S", time.gmtime(seconds))
    shown = {"train_loss": final.train_loss, **final.eval}
    lines = [f"done: step {final.step}/{config.num_train_steps} (steps {start + 1}-{final.step} "
             f"in {wall} wall, start-up included)",
             "final metrics: " + (" ".join(f"{k}={v:.4f}" for k, v in shown.items()
                                           if v is not None) or "none"),
             f"checkpoints: {workdir}/checkpoints (latest step {final.step}"
             + (f", best eval_loss at step {best})" if best is not None else ")"),
             f"TensorBoard: tensorboard --logdir {workdir}"]
    if not finished:
        lines.append(f"stopped at step {final.step} of {config.num_train_steps} "
                     f"(stop_after_steps={config.stop_after_steps}): rerun without it to "
                     f"continue")
        return "\n".join(lines)
    lines += [f"final_metrics.json: {results.FinalMetrics.path(workdir)}",
              "next:",
              f"  python eval_glue.py --config configs/glue.py:task=rte "
              f"--config.init_from={workdir} --workdir {workdir}_glue  "
              f"# GLUE from the hub; --config.glue_dir=DIR reads local TSVs",
              *([f"  python scripts/export_hf.py --workdir {workdir} --out {workdir}_hf"]
                if config.model.attention in EXPORTABLE_ATTENTION else []),
              f"  python scripts/fill_mask.py --workdir {workdir} \"Paris is the [MASK] of "
              f"France.\""]
    return "\n".join(lines)


def nothing_to_train(workdir: str, start: int, config: ml_collections.ConfigDict
                     ) -> dict[str, float]:
    """The console lines of a rerun with nothing left to train, and its final metrics."""
    if start < config.num_train_steps:  # stop_after_steps ended this invocation
        metrics.console(f"{workdir} is at step {start} of {config.num_train_steps}, "
                        f"stop_after_steps={config.stop_after_steps}: nothing to train in this "
                        f"invocation; rerun without it (or with a later one) to continue")
        return {}
    past = (f", past num_train_steps={config.num_train_steps} (nothing is changed)"
            if start > config.num_train_steps else "")
    metrics.console(f"{workdir} is already at step {start}{past}; nothing to train")
    final = results.read_quietly(results.FinalMetrics, workdir)
    if final is None or final.step != start:
        metrics.console(f"no final metrics of step {start} ({results.FinalMetrics.path(workdir)} "
                        f"is missing or of another step)")
        return {}
    shown = {k: v for k, v in final.to_json().items() if v is not None}
    metrics.console("final metrics: " + " ".join(
        f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()))
    return final.to_json()


def copy_tokenizer(source: os.PathLike | str, target: str) -> None:
    os.makedirs(target, exist_ok=True)
    for name in ("tokenizer.json", "vocab.txt"):
        path = os.path.join(source, name)
        if os.path.exists(path):
            copy_file_atomic(path, os.path.join(target, name))
