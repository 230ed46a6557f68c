"""Pretraining's step loop: what runs between the first and the last step.

The host never waits for the device inside the loop: step s+1 is dispatched before step
s's metrics are read (at log steps only), and finiteness is tracked on the device and
read at log, eval and checkpoint time. Nothing non-finite is evaluated or saved: the
check runs first. What the loop changes as it goes lives in one `LoopState`; what it
only reads (the compiled step, the batches, the writers) in one `StepLoop`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import flax.linen as nn
import jax
import ml_collections

from training import checkpoints, metrics, results, sharding, steps


class TrainingError(RuntimeError):
    """A run that cannot go on (non-finite loss, mismatched checkpoint); names the cause."""


class NonFiniteStep(TrainingError):
    """nonfinite=error met a non-finite loss or gradient: the run diverged at `step`."""

    def __init__(self, message: str, step: int, seen_at: int):
        super().__init__(message)
        self.step, self.seen_at = step, seen_at


@dataclasses.dataclass
class Window:
    """The train steps since the last log line, and the time spent outside them (eval
    and checkpoints are not throughput)."""

    start: float
    steps: int = 0
    paused: float = 0.0


@dataclasses.dataclass
class LoopState:
    """Everything the loop changes: the train state, the device's health record, the
    log window, the metrics last seen, and whether a signal stopped the run."""

    train_state: Any
    health: Any
    window: Window
    done: int = 0  # steps finished
    last_eval: dict[str, float] = dataclasses.field(default_factory=dict)
    last_train: dict[str, float] = dataclasses.field(default_factory=dict)
    skipped_logged: int = 0  # skipped non-finite updates already reported
    pending_log: tuple[int, Any, int] | None = None  # (step, its metrics, steps in window)
    preempted: bool = False


@dataclasses.dataclass(frozen=True)
class Evaluator:
    """Held-out metrics over fixed eval batches (`batches` None: no eval split): the
    objective's sums, totalled over the batches, and its eval scalars from them."""

    eval_step: Any
    batches: Any
    mesh: Any
    rules: Any
    objective: Any  # training/steps.py: MLMObjective

    def __call__(self, params: Any) -> dict[str, float]:
        """Empty when there is nothing to score (never a 0 loss)."""
        if self.batches is None:
            return {}
        totals = dict.fromkeys(self.objective.sum_names, 0.0)
        with self.mesh, nn.logical_axis_rules(self.rules):
            for i in range(len(self.batches)):
                batch = sharding.host_batch_to_global(self.batches.batch(i), self.mesh,
                                                      self.rules)
                sums = jax.device_get(self.eval_step(params, batch))
                totals = {k: totals[k] + float(sums[k]) for k in totals}
        return self.objective.eval_scalars(totals)


@dataclasses.dataclass(frozen=True)
class Throughput:
    """What a log line's speed figures are computed from."""

    tokens_per_step: int
    step_flops: float  # analytic FLOPs of one train step (models/flops.py)
    peak_flops: float  # of all devices together


@dataclasses.dataclass(frozen=True)
class StepLoop:
    """What the loop reads and never changes."""

    config: ml_collections.ConfigDict
    mesh: Any
    rules: Any
    train_step: Any
    objective: Any  # the train step's (training/steps.py): what its sums become
    batcher: Any
    evaluate: Evaluator
    writer: metrics.MetricWriter
    progress: metrics.Progress
    throughput: Throughput
    checkpointer: checkpoints.Checkpointer
    checkpoint_config: dict[str, Any]
    preemption: Any  # training.preemption.PreemptionFlag


def read_health(loop: StepLoop, state: LoopState) -> dict[str, int]:
    """The device's health record; with nonfinite=error, a non-finite step stops here."""
    health = {k: int(v) for k, v in jax.device_get(state.health).items()}
    if loop.config.nonfinite == "error" and health["first_nonfinite"]:
        step, seen_at = health["first_nonfinite"], int(state.train_state["step"])
        raise NonFiniteStep(
            f"non-finite loss or gradient at step {step} (seen at step {seen_at}); not "
            f"checkpointed. Lower the learning rate or set --config.nonfinite=skip",
            step, seen_at)
    return health


def update_scalars(m: dict[str, Any]) -> dict[str, float]:
    """The update's scalars, whatever the objective (training/steps.py apply_update)."""
    return {name: float(m[name]) for name in ("learning_rate", "grad_norm", "param_norm")}


def write_pending_log(loop: StepLoop, state: LoopState) -> None:
    """The log line of the last log step, if one waits: reading its metrics waits for
    that step only (the next one is already dispatched)."""
    if state.pending_log is None:
        return
    done, step_metrics, window_steps = state.pending_log
    state.pending_log = None
    m = jax.device_get(step_metrics)
    health = read_health(loop, state)
    now = time.time()
    window = state.window
    step_time = (now - window.start - window.paused) / window_steps
    objective_scalars = loop.objective.train_scalars(m)  # MLM: loss and accuracy
    state.last_train = {**objective_scalars, **update_scalars(m)}
    speed = loop.throughput
    values = {
        **state.last_train,
        "skipped_nonfinite": health["skipped"] - state.skipped_logged,
        "step_time_s": step_time,
        "tokens_per_s": speed.tokens_per_step / step_time,
        "mfu": speed.step_flops / step_time / speed.peak_flops,
        "epoch": loop.batcher.epoch(done),
    }
    state.skipped_logged = health["skipped"]
    loop.writer.scalars(done, values)
    loop.progress.log(done, {k: values[k] for k in (
        *objective_scalars, "learning_rate", "tokens_per_s", "mfu")})
    state.window.start, state.window.paused = now, 0.0  # its step count runs on


def evaluate_and_report(evaluate: Evaluator, writer: metrics.MetricWriter, state: LoopState,
                        step: int, note: str = "") -> None:
    """An eval at `step`: TensorBoard and a console line (`note` says of what)."""
    state.last_eval = evaluate(state.train_state["params"])
    if state.last_eval:
        writer.scalars(step, state.last_eval)
        metrics.console(f"eval at step {step}{note}: "
                        + " ".join(f"{k}={v:.4f}" for k, v in state.last_eval.items()))


def train_one_step(loop: StepLoop, state: LoopState, step: int) -> Any:
    """Dispatches step `step` (no wait) and tracks its health on the device."""
    batch = sharding.host_batch_to_global(loop.batcher.batch(step), loop.mesh, loop.rules)
    with loop.mesh, nn.logical_axis_rules(loop.rules):
        state.train_state, step_metrics = loop.train_step(state.train_state, batch)
    state.done = step + 1
    state.health = steps.track_health(state.health, step_metrics["finite"], state.done)
    state.window.steps += 1
    return step_metrics


def after_step(loop: StepLoop, state: LoopState, step_metrics: Any, end: int) -> None:
    """Logs, evaluates and checkpoints as the step numbers say; a signal checkpoints now."""
    config, done = loop.config, state.done
    write_pending_log(loop, state)  # the previous log step, read while this one runs
    last = done == end
    logged = done % config.log_every_steps == 0 or last
    if logged:
        state.pending_log = (done, step_metrics, state.window.steps)
        state.window.steps = 0
    evaluated = done % config.eval_every_steps == 0 or last
    # With several processes, asking every process about the signal is an all-gather:
    # at log steps only.
    if jax.process_count() == 1 or logged:
        state.preempted = loop.preemption.requested()
    checkpointed = done % config.checkpoint_every_steps == 0 or last or state.preempted
    if not (evaluated or checkpointed):
        return
    write_pending_log(loop, state)
    pause_start = time.time()
    read_health(loop, state)
    if evaluated:
        evaluate_and_report(loop.evaluate, loop.writer, state, done)
    if checkpointed:
        scores = ({"eval_loss": state.last_eval["eval_loss"]} if evaluated and state.last_eval
                  else None)
        loop.checkpointer.save(done, state.train_state, loop.checkpoint_config, metrics=scores)
    loop.writer.flush()
    state.window.paused += time.time() - pause_start


def run_steps(loop: StepLoop, state: LoopState, start: int, end: int) -> None:
    """Steps start..end-1, or until a signal asks the run to stop (after saving)."""
    for step in range(start, end):
        step_metrics = train_one_step(loop, state, step)
        after_step(loop, state, step_metrics, end)
        if state.preempted:
            break


def final_record(loop: StepLoop, state: LoopState, end: int) -> results.FinalMetrics:
    return results.FinalMetrics(end, state.last_train.get("loss"), dict(state.last_eval),
                                skipped_nonfinite=read_health(loop, state)["skipped"])
