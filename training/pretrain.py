"""MLM pretraining: everything train.py runs, as importable functions.

Sections follow the run: logging, mesh, input, model and optimizer, sharded
state, steps, checkpoint/resume, loop. The batch for step s is a pure function
of (seed, s), so a restarted run needs only the step stored in its checkpoint.
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
import numpy as np

import input_pipeline
from attention import registry
from common.files import copy_file_atomic, write_json_atomic
from models import BertForMaskedLM, ModelConfig
from models.config import EXECUTION_FIELDS
from models.flops import flop_count
from models.hf_export import EXPORTABLE_ATTENTION
from training import checkpoints, hardware, metrics, results, sharding, steps, warm_start
from training import workdir as workdir_lib
from training.cli import Stopped
from training.optimizer import make_optimizer
from training.preemption import PreemptionFlag
from training.workdir import WorkdirLock


class TrainingError(RuntimeError):
    """A run that cannot go on (non-finite loss, mismatched checkpoint); names the cause."""


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


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'talking_heads': {'init': ...}} -> {'talking_heads.init': ...}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_same_architecture(saved: dict[str, Any], current: ModelConfig, path: str) -> None:
    """Refuses a checkpoint whose parameters mean something else (nested settings too).
    A field the saved config lacks was added to the code after the checkpoint was made:
    the checkpoint meant its default."""
    saved_model = flatten(saved.get("model", {}))
    defaults = flatten(type(current)().to_dict())
    ignored = set(EXECUTION_FIELDS)
    # Settings of variants other than the one in use change nothing.
    ignored |= {k for k in defaults if k.split(".")[0] in registry.with_settings()
                and k.split(".")[0] != current.attention}
    differs = {
        k: (saved_model.get(k, defaults.get(k)), v)
        for k, v in flatten(current.to_dict()).items()
        if k not in ignored and saved_model.get(k, defaults.get(k)) != v
    }
    if differs:
        name, (old, new) = next(iter(sorted(differs.items())))
        raise TrainingError(
            f"{path} holds a checkpoint of a different architecture "
            f"(model.{name}: checkpoint {old!r}, config {new!r}); use a new --workdir"
        )


def data_identity(data_config: ml_collections.ConfigDict, tokenizer_dir: str | None
                  ) -> dict[str, str]:
    """What the token ids of a run mean: the corpus and the tokenizer (cheap to compute:
    file sizes and times, or a hub dataset's fingerprint, and the vocabulary's hash)."""
    source = input_pipeline.corpus.parse_corpus_spec(
        data_config.corpus, max_chars=data_config.max_corpus_chars,
        text_column=data_config.text_column,
        encoding=data_config.get("encoding", input_pipeline.textfiles.DEFAULT_ENCODING))
    identity = {"corpus": source.describe(), "corpus_identity": source.identity()}
    if tokenizer_dir is not None:
        tokenizer = input_pipeline.load_tokenizer(tokenizer_dir)
        identity["tokenizer_hash"] = input_pipeline.tokenizer.tokenizer_hash(tokenizer)
    return identity


# config.data fields that decide which token ids the text becomes.
TOKEN_ID_FIELDS = ("tokenizer", "vocab_size", "lowercase", "tokenizer_sample")


def check_same_data(saved: dict[str, Any], identity: dict[str, str],
                    data_config: ml_collections.ConfigDict, path: str) -> None:
    """Refuses to continue a run on other text or other token ids."""
    saved_data = saved.get("data", {})
    for name in TOKEN_ID_FIELDS:
        if name in saved_data and saved_data[name] != data_config[name]:
            raise TrainingError(
                f"{path} was trained with data.{name}={saved_data[name]!r}, not "
                f"{data_config[name]!r}: its token ids would change meaning; use a new "
                f"--workdir")
    saved_identity = saved.get("data_identity")
    if saved_identity is None:
        metrics.console(f"warning: {path} predates data identity checks; resuming unchecked")
        return
    if saved_identity.get("corpus_identity") != identity["corpus_identity"]:
        raise TrainingError(
            f"{path} was trained on another corpus ({saved_identity.get('corpus')}, as it was "
            f"then) than data.corpus={identity['corpus']} is now; resume with the same "
            f"unchanged corpus or use a new --workdir")
    if saved_identity.get("tokenizer_hash") != identity.get("tokenizer_hash"):
        raise TrainingError(
            f"{path} was trained with another tokenizer than {identity.get('tokenizer_dir')}; "
            f"resume with the run's own tokenizer/ or use a new --workdir")


@dataclasses.dataclass
class Compiled:
    abstract_state: Any  # ShapeDtypeStructs carrying their shardings
    state_shardings: Any
    init_fn: Any  # rng -> state, created directly sharded
    train_step: Any  # (state, batch) -> (state, metrics); state donated
    eval_step: Any  # (params, batch) -> sums


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
    train_step = state.jit_step(steps.make_train_step(
        model, optimizer, schedule, config.seed, config.grad_accum_steps,
        config.nonfinite == "skip", prepare_params=state.gather, masker=masker))
    with mesh, nn.logical_axis_rules(rules):
        eval_step = jax.jit(steps.make_eval_step(model, state.gather, masker))
    return Compiled(state.abstract, state.shardings, state.init, train_step, eval_step)


def build_data(data_config: ml_collections.ConfigDict, workdir: str):
    """Process 0 builds the tokenizer and packed cache first; the others then read it.

    Tokenizer training is not bit-reproducible across processes, so they must
    share one: on several hosts, point data.cache_dir at a shared filesystem or
    pass a ready data.tokenizer.
    """
    if jax.process_count() == 1:
        return input_pipeline.from_config(data_config, workdir)
    from jax.experimental import multihost_utils

    data = input_pipeline.from_config(data_config, workdir) if jax.process_index() == 0 else None
    multihost_utils.sync_global_devices("input pipeline built by process 0")
    return data or input_pipeline.from_config(data_config, workdir)


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
    is_main = jax.process_index() == 0
    began = time.time()

    # -- mesh -----------------------------------------------------------------------
    mesh = sharding.make_mesh(dict(config.mesh))
    rules = sharding.rules_from_config(config.logical_axis_rules)
    check_batch_fits_mesh(config, mesh, rules)
    metrics.console(f"mesh {dict(mesh.shape)} over {jax.device_count()} devices "
                    f"({jax.process_count()} processes)")

    # -- resume or start: decided before any data is built or file written -----------
    checkpointer = checkpoints.Checkpointer(
        os.path.join(workdir, "checkpoints"), keep_last=config.keep_checkpoints,
        best_metric="eval_loss")
    resuming = checkpointer.latest_step() is not None
    run_tokenizer = os.path.join(workdir, "tokenizer")
    source = None  # a warm start's source, read before anything is written
    warm_resume = resuming and warm_start.resume(config, workdir) is not None
    if warm_resume:
        check_positions(config)
    elif config.init_from and not resuming:
        source = warm_start.start(config)
    data_config = config.data
    if resuming:
        # The checkpoints' token ids mean what the run's own tokenizer says: never
        # retrain (or replace) it on resume. A warm start's is its source's, copied in.
        data_config = ml_collections.ConfigDict(config.data.to_dict())
        data_config.tokenizer = (run_tokenizer if warm_resume
                                 else config.data.tokenizer or run_tokenizer)
        if not os.path.exists(data_config.tokenizer):
            raise TrainingError(f"{run_tokenizer} is missing, so the checkpoints' token ids "
                                f"cannot be read; pass --config.data.tokenizer or use a new "
                                f"--workdir")
        identity = {**data_identity(data_config, data_config.tokenizer),
                    "tokenizer_dir": data_config.tokenizer}
        tokenizer = input_pipeline.load_tokenizer(data_config.tokenizer,
                                                  lowercase=data_config.lowercase)
    else:
        data = build_data(data_config, workdir)
        identity = {"corpus": data.meta["corpus"],
                    "corpus_identity": data.meta["corpus_identity"],
                    "tokenizer_hash": data.meta["tokenizer_hash"]}
        tokenizer = data.tokenizer

    # -- model and optimizer --------------------------------------------------------
    model_cfg = model_config_for(config, input_pipeline.tokenizer.vocab_bound(tokenizer))
    model = BertForMaskedLM(model_cfg)
    optimizer, schedule = make_optimizer(config.optimizer, config.num_train_steps)
    seq_len, predictions = config.data.max_seq_length, config.data.max_predictions_per_seq

    on_device = config.data.masking == "device"
    masker = None
    if on_device:
        from input_pipeline.device_masking import DeviceMasker

        masker = DeviceMasker.for_tokenizer(
            tokenizer, config.data.max_predictions_per_seq, config.data.mask_prob,
            config.data.whole_word_mask, mask_targets=config.data.mask_targets,
            mask_token_prob=config.data.mask_token_prob,
            random_token_prob=config.data.random_token_prob)
    compiled = compile_for_mesh(model, optimizer, schedule, config, mesh, rules, masker)
    abstract_state = compiled.abstract_state
    init_fn, train_step, eval_step = compiled.init_fn, compiled.train_step, compiled.eval_step
    num_params = sum(x.size for x in jax.tree.leaves(abstract_state["params"]))

    # -- checkpoint / resume --------------------------------------------------------
    run_config = config.to_dict()
    # The checkpoint carries what its token ids mean, for the next resume to check.
    checkpoint_config = {**run_config, "data_identity": {
        k: v for k, v in identity.items() if k != "tokenizer_dir"}}
    if resuming:
        def refuse_another_run(saved: dict[str, Any]) -> None:
            check_same_architecture(saved, model_cfg, workdir)
            check_same_data(saved, identity, config.data, workdir)

        state, saved, start = checkpointer.restore(abstract_state,
                                                   check_config=refuse_another_run)
        metrics.console(f"resumed from {checkpointer.directory} at step {start}")
        data = build_data(data_config, workdir)
    else:
        with mesh, nn.logical_axis_rules(rules):
            state = init_fn(jax.random.key(config.seed))
        if source is not None:  # fresh optimizer state and schedule, the source's weights
            state["params"] = warm_start.with_source(state["params"], source,
                                                     compiled.state_shardings["params"])
        start = 0
    stale = results.FinalMetrics.set_aside_if_stale(workdir) if is_main else None
    if stale:
        metrics.console(f"warning: final_metrics.json reported a checkpoint that is gone "
                        f"(deleted, or set aside as damaged); moved to {stale}: the run is "
                        f"not finished")
    metrics.console(f"model {model_cfg.attention}: {num_params / 1e6:.2f}M parameters, "
                    f"vocabulary {data.vocab_size}, {len(data.train)} train sequences")

    end = config.num_train_steps
    if config.stop_after_steps is not None:
        end = min(end, config.stop_after_steps)
    if start >= end:
        # Nothing to train: leave every file as it is, and say where the run stands.
        checkpointer.close()
        return nothing_to_train(workdir, start, config)
    if resuming:
        check_schedule(saved, config, start, workdir)
    if is_main:
        if not resuming:
            # The run directory is self-contained: eval_glue.py reads WORKDIR/tokenizer.
            copy_tokenizer(data.tokenizer_dir, run_tokenizer)
            warm_start.record(workdir, config, source)  # what a resume reads, or no record
        write_json_atomic(os.path.join(workdir, "config.json"), run_config)

    # -- input ----------------------------------------------------------------------
    # Each process builds only its own rows of every global batch.
    shard = {"process_index": jax.process_index(), "process_count": jax.process_count()}
    batcher = data.batcher(config.batch_size, seed=config.seed, on_device=on_device, **shard)
    # Eval masks use a fixed seed so every run (and every seed) is scored on the same targets.
    has_eval = len(data.eval) > 0 and config.eval_batches > 0
    if has_eval:
        eval_batches = data.eval_batches(config.batch_size, config.eval_batches, seed=0,
                                         on_device=on_device, **shard)
    else:
        metrics.console("warning: no held-out eval (the eval split is empty or "
                        "eval_batches=0): no eval metrics are reported and checkpoints are "
                        "kept by step only")

    writer = metrics.MetricWriter(workdir)
    if start == 0:
        writer.write_config(run_config)
    flops = flop_count(model_cfg, seq_len)
    step_flops = flops.train_step(config.batch_size * seq_len, config.batch_size * predictions)
    peak = config.peak_flops_per_device or hardware.peak_flops_per_device()
    tokens_per_step = config.batch_size * seq_len

    def evaluate() -> dict[str, float]:
        """Held-out MLM metrics; empty when there is nothing to score (never 0 loss)."""
        if not has_eval:
            return {}
        totals = {"loss_sum": 0.0, "correct": 0.0, "weight": 0.0}
        with mesh, nn.logical_axis_rules(rules):
            for i in range(len(eval_batches)):
                batch = sharding.host_batch_to_global(eval_batches.batch(i), mesh, rules)
                sums = jax.device_get(eval_step(state["params"], batch))
                totals = {k: totals[k] + float(sums[k]) for k in totals}
        if totals["weight"] == 0:
            return {}
        loss = totals["loss_sum"] / totals["weight"]
        return {"eval_loss": loss, "eval_accuracy": totals["correct"] / totals["weight"],
                "eval_perplexity": float(np.exp(min(loss, 50.0)))}

    # -- loop -----------------------------------------------------------------------
    # The host never waits for the device inside the loop: step s+1 is dispatched before
    # step s's metrics are read (at log steps only), and finiteness is tracked on the
    # device and read at log, eval and checkpoint time. Nothing non-finite is evaluated
    # or saved: the check runs first.
    last_eval: dict[str, float] = {}
    last_train: dict[str, float] = {}
    health = steps.initial_health()
    skipped_logged = 0
    window = {"start": time.time(), "steps": 0, "paused": 0.0}
    pending_log: tuple[int, Any, int] | None = None  # (step, its metrics, steps in window)
    preempted = False
    check_every_step = jax.process_count() == 1  # else an all-gather: at log steps only

    def read_health() -> dict[str, int]:
        h = {k: int(v) for k, v in jax.device_get(health).items()}
        if config.nonfinite == "error" and h["first_nonfinite"]:
            raise TrainingError(
                f"non-finite loss or gradient at step {h['first_nonfinite']} (seen at step "
                f"{int(state['step'])}); not checkpointed. Lower the learning rate or set "
                f"--config.nonfinite=skip")
        return h

    def log(done: int, step_metrics: Any, window_steps: int) -> None:
        nonlocal last_train, skipped_logged
        m = jax.device_get(step_metrics)  # waits for step `done` only
        h = read_health()
        now = time.time()
        step_time = (now - window["start"] - window["paused"]) / window_steps
        last_train = train_scalars(m)
        values = {
            **last_train,
            "skipped_nonfinite": h["skipped"] - skipped_logged,
            "step_time_s": step_time,
            "tokens_per_s": tokens_per_step / step_time,
            "mfu": step_flops / step_time / (peak * jax.device_count()),
            "epoch": batcher.epoch(done),
        }
        skipped_logged = h["skipped"]
        writer.scalars(done, values)
        progress.log(done, {k: values[k] for k in (
            "loss", "mlm_accuracy", "learning_rate", "tokens_per_s", "mfu")})
        window.update(start=now, paused=0.0)

    if source is not None and has_eval:
        # Where the warm start begins: the source's eval loss on this run's eval batches.
        last_eval = evaluate()
        if last_eval:
            writer.scalars(0, last_eval)
            metrics.console(f"eval at step 0 ({source.description}): "
                            + " ".join(f"{k}={v:.4f}" for k, v in last_eval.items()))
    first_line = min(end, (start // config.log_every_steps + 1) * config.log_every_steps)
    metrics.console(f"compiling the train step; the first line comes at step {first_line}")
    progress = metrics.Progress(config.num_train_steps, start)
    try:
        with PreemptionFlag() as preemption:
            for step in range(start, end):
                batch = sharding.host_batch_to_global(batcher.batch(step), mesh, rules)
                with mesh, nn.logical_axis_rules(rules):
                    state, step_metrics = train_step(state, batch)
                done = step + 1
                health = steps.track_health(health, step_metrics["finite"], done)
                window["steps"] += 1
                if pending_log is not None:  # the previous log step, read while this runs
                    log(*pending_log)
                    pending_log = None
                last = done == end
                if done % config.log_every_steps == 0 or last:
                    pending_log = (done, step_metrics, window["steps"])
                    window["steps"] = 0
                evaluated = done % config.eval_every_steps == 0 or last
                if check_every_step or done % config.log_every_steps == 0 or last:
                    preempted = preemption.requested()
                checkpointed = done % config.checkpoint_every_steps == 0 or last or preempted
                if not (evaluated or checkpointed):
                    continue
                if pending_log is not None:
                    log(*pending_log)
                    pending_log = None
                pause_start = time.time()  # eval and checkpoint time is not throughput
                read_health()
                if evaluated:
                    last_eval = evaluate()
                    if last_eval:
                        writer.scalars(done, last_eval)
                        metrics.console(f"eval at step {done}: "
                                        + " ".join(f"{k}={v:.4f}" for k, v in last_eval.items()))
                if checkpointed:
                    scores = {"eval_loss": last_eval["eval_loss"]} if (
                        evaluated and last_eval) else None
                    checkpointer.save(done, state, checkpoint_config, metrics=scores)
                writer.flush()
                window["paused"] += time.time() - pause_start
                if preempted:
                    break
        final = results.FinalMetrics(end, last_train.get("loss"), dict(last_eval),
                                     skipped_nonfinite=read_health()["skipped"])
        finished = end == config.num_train_steps
        if is_main and finished and not preempted:
            final.write(workdir)
        checkpointer.wait()  # the last save's metrics, for the summary's best step
        best = checkpointer.best_step("eval_loss")
    finally:
        writer.close()
        checkpointer.close()
    if preempted:
        raise Stopped(f"{preemption.signal_name}: saved step {done}; rerun the same command "
                      f"to continue")
    metrics.console(end_of_run(workdir, final, config, start, time.time() - began, best,
                               finished))
    return final.to_json()


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


# Fields that define the learning rate at every step: a resume with other values runs
# another schedule from step 0 on (training/optimizer.py).
SCHEDULE_FIELDS = ("num_train_steps", "optimizer.learning_rate", "optimizer.schedule",
                   "optimizer.warmup_steps")


def check_schedule(saved: dict[str, Any], config: ml_collections.ConfigDict, start: int,
                   workdir: str) -> None:
    """A resume that changes the schedule (extending training to more steps, say) must
    say so: refused unless extend_schedule=true, then one warning with the new rate."""
    before, now = flatten(saved), flatten(config.to_dict())
    changed = {k: (before.get(k), now[k]) for k in SCHEDULE_FIELDS
               if k in before and before[k] != now[k]}
    if not changed:
        return
    what = ", ".join(f"{k}={old!r} -> {new!r}" for k, (old, new) in changed.items())
    old_config = ml_collections.ConfigDict(config.to_dict())
    for k, (old, _) in changed.items():
        *parents, field = k.split(".")
        node = old_config
        for parent in parents:
            node = node[parent]
        node[field] = old
    _, old_schedule = make_optimizer(old_config.optimizer, old_config.num_train_steps)
    _, new_schedule = make_optimizer(config.optimizer, config.num_train_steps)
    rates = (f"the learning rate at step {start} becomes {float(new_schedule(start)):.3g} "
             f"(was {float(old_schedule(start)):.3g})")
    if not config.extend_schedule:
        raise TrainingError(
            f"{workdir} was trained on another learning-rate schedule ({what}): {rates} and "
            f"differs from step 0 on; pass --config.extend_schedule=true to continue on the "
            f"new one, or use a new --workdir")
    metrics.console(f"warning: extend_schedule: {what}; {rates}")


def train_scalars(m: dict[str, Any]) -> dict[str, float]:
    """Per-step scalars from the step's sums (loss and accuracy over its real targets)."""
    weight = max(float(m["weight"]), 1.0)
    return {
        "loss": float(m["loss_sum"]) / weight,
        "mlm_accuracy": float(m["correct"]) / weight,
        "learning_rate": float(m["learning_rate"]),
        "grad_norm": float(m["grad_norm"]),
        "param_norm": float(m["param_norm"]),
    }


def copy_tokenizer(source: os.PathLike | str, target: str) -> None:
    os.makedirs(target, exist_ok=True)
    for name in ("tokenizer.json", "vocab.txt"):
        path = os.path.join(source, name)
        if os.path.exists(path):
            copy_file_atomic(path, os.path.join(target, name))
