"""Optimizers and learning-rate schedules, built from optax, for pretraining and GLUE.

Two recipes that BERT-era papers call "AdamW with linear decay" differ:

  optimizer.name=adamw, schedule=linear (default): Hugging Face's / optax's AdamW
    (bias-corrected moments) and HF's `get_linear_schedule_with_warmup` (linear
    warmup, then linear decay to 0 over the steps *after* warm-up).
  optimizer.name=bert_adamw, schedule=bert_linear: google-research/bert's
    `AdamWeightDecayOptimizer` (no bias correction) and its schedule (linear decay
    to 0 over *all* steps, replaced by the linear warm-up while it lasts, so the
    rate steps down from peak to peak * (1 - warmup/steps) when warm-up ends).
    The papers' BERT runs used this one.

`lamb` is You et al.'s LAMB as BERT-era code runs it: bias-corrected Adam, decoupled
weight decay, and the layer-wise trust ratio; biases and LayerNorm parameters are
excluded from the trust ratio exactly as from weight decay (optax.lamb's `mask`
covers only the decay, which freezes zero-initialised biases at updates of lr^2).

Every optimizer takes its learning rate from the train step, not from an internal
counter: `optimizer.update` reads `opt_state.hyperparams["learning_rate"]`, which
`with_learning_rate(opt_state, schedule(step))` sets. A skipped non-finite update
(`nonfinite=skip`) keeps the old optimizer state but the step moves on, and the
rate applied stays the one logged for that step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

OPTIMIZERS = ("adamw", "bert_adamw", "lamb")
SCHEDULES = ("linear", "bert_linear", "cosine", "constant")


class OptimizerError(ValueError):
    """A bad optimizer setting; the message names the config field."""


def learning_rate_schedule(cfg: Any, total_steps: int) -> optax.Schedule:
    """Warm-up from 0 to cfg.learning_rate, then the named decay (see module docstring)."""
    if cfg.schedule not in SCHEDULES:
        raise OptimizerError(f"optimizer.schedule={cfg.schedule!r} is unknown; choose {SCHEDULES}")
    warmup = int(cfg.warmup_steps)
    if warmup < 0:
        raise OptimizerError(f"optimizer.warmup_steps={warmup} must be >= 0")
    if warmup > total_steps:
        # A short run (a smoke test, steps=20) keeps the default warmup usable.
        logging.warning("optimizer.warmup_steps=%d exceeds %d steps; warming up over all of them",
                        warmup, total_steps)
        warmup = total_steps
    peak = float(cfg.learning_rate)
    if cfg.schedule == "bert_linear":
        return _bert_linear(peak, warmup, total_steps)
    decay_steps = max(total_steps - warmup, 1)
    if cfg.schedule == "linear":
        decay = optax.linear_schedule(peak, 0.0, decay_steps)
    elif cfg.schedule == "cosine":
        decay = optax.cosine_decay_schedule(peak, decay_steps)
    else:
        decay = optax.constant_schedule(peak)
    if warmup == 0:
        return decay
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), decay], [warmup])


def _bert_linear(peak: float, warmup: int, total_steps: int) -> optax.Schedule:
    """google-research/bert optimization.create_optimizer: polynomial_decay(power=1) over
    all steps, with peak * step / warmup in its place while step < warmup."""
    decay = optax.polynomial_schedule(peak, 0.0, power=1, transition_steps=max(total_steps, 1))

    def schedule(step):
        if warmup == 0:
            return decay(step)
        warming = peak * jnp.asarray(step, jnp.float32) / warmup
        return jnp.where(step < warmup, warming, decay(step))

    return schedule


def decay_mask(params: Any) -> Any:
    """True for weight matrices; False for biases, LayerNorm scales and 1-d vectors."""

    def decays(path: tuple[Any, ...], leaf: Any) -> bool:
        # The last dict key is the parameter's name (boxed params add a '.value' step).
        keys = [p.key for p in path if isinstance(p, jax.tree_util.DictKey)]
        return leaf.ndim > 1 and keys[-1] not in ("bias", "scale")

    return jax.tree_util.tree_map_with_path(decays, params)


class _MomentsState(NamedTuple):
    mu: Any
    nu: Any


def scale_by_adam_without_bias_correction(b1: float, b2: float, eps: float
                                          ) -> optax.GradientTransformation:
    """m / (sqrt(v) + eps) with raw moving averages, as google-research/bert's
    AdamWeightDecayOptimizer (optax's scale_by_adam always corrects the bias)."""

    def init(params):
        return _MomentsState(optax.tree.zeros_like(params), optax.tree.zeros_like(params))

    def update(updates, state, params=None):
        del params
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
        return updates, _MomentsState(mu, nu)

    return optax.GradientTransformation(init, update)


def _direction(cfg: Any) -> optax.GradientTransformation:
    """The update direction before the learning rate (clipping, moments, decay, trust)."""
    if cfg.name == "bert_adamw":
        moments = scale_by_adam_without_bias_correction(cfg.b1, cfg.b2, cfg.eps)
    else:
        moments = optax.scale_by_adam(b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)
    parts = [moments, optax.add_decayed_weights(cfg.weight_decay, mask=decay_mask)]
    if cfg.name == "lamb":
        parts.append(optax.masked(optax.scale_by_trust_ratio(), decay_mask))
    if cfg.grad_clip_norm and cfg.grad_clip_norm > 0:
        parts.insert(0, optax.clip_by_global_norm(cfg.grad_clip_norm))
    return optax.chain(*parts)


def make_optimizer(cfg: Any, total_steps: int) -> tuple[optax.GradientTransformation, Any]:
    """(optimizer, schedule) for cfg.name in OPTIMIZERS; set the rate with with_learning_rate.

    cfg fields: name, learning_rate, schedule, warmup_steps, b1, b2, eps, weight_decay,
    grad_clip_norm (configs/pretrain.py's `optimizer` block).
    """
    if cfg.name not in OPTIMIZERS:
        raise OptimizerError(f"optimizer.name={cfg.name!r} is unknown; choose one of {OPTIMIZERS}")
    for name in ("learning_rate", "b1", "b2", "eps", "weight_decay", "grad_clip_norm"):
        value = cfg.get(name) if hasattr(cfg, "get") else getattr(cfg, name, None)
        # The optimizer runs in float32: 1e39 is inf there, and inf or NaN makes every
        # update non-finite.
        with np.errstate(over="ignore"):  # the overflow is what is checked for
            representable = value is None or np.isfinite(np.float32(value))
        if not representable:
            raise OptimizerError(f"optimizer.{name}={value} is not a finite float32 number")
    if float(cfg.learning_rate) <= 0:
        raise OptimizerError(f"optimizer.learning_rate={cfg.learning_rate} must be > 0")
    schedule = learning_rate_schedule(cfg, total_steps)

    def build(learning_rate):
        return optax.chain(_direction(cfg), optax.scale_by_learning_rate(learning_rate))

    return optax.inject_hyperparams(build)(learning_rate=float(cfg.learning_rate)), schedule


def with_learning_rate(opt_state: Any, learning_rate: Any) -> Any:
    """The optimizer state with the rate its next update applies set to `learning_rate`."""
    hyperparams = {**opt_state.hyperparams,
                   "learning_rate": jnp.asarray(learning_rate, jnp.float32)}
    return opt_state._replace(hyperparams=hyperparams)
