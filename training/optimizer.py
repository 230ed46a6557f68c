"""Optimizers and learning-rate schedules, all from optax.

BERT's recipe: AdamW (or LAMB for large batches), linear warmup then linear
decay to zero, global-norm gradient clipping, and no weight decay on biases or
LayerNorm parameters.
"""

from __future__ import annotations

from typing import Any

import jax
import optax
from absl import logging

OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "cosine", "constant")


class OptimizerError(ValueError):
    """A bad optimizer setting; the message names the config field."""


def learning_rate_schedule(cfg: Any, total_steps: int) -> optax.Schedule:
    """Warmup from 0 to cfg.learning_rate, then the named decay over the remaining steps."""
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


def decay_mask(params: Any) -> Any:
    """True for weight matrices; False for biases, LayerNorm scales and 1-d vectors."""

    def decays(path: tuple[Any, ...], leaf: Any) -> bool:
        # The last dict key is the parameter's name (boxed params add a '.value' step).
        keys = [p.key for p in path if isinstance(p, jax.tree_util.DictKey)]
        return leaf.ndim > 1 and keys[-1] not in ("bias", "scale")

    return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(cfg: Any, total_steps: int) -> tuple[optax.GradientTransformation, Any]:
    """(optimizer, schedule) for cfg.name in OPTIMIZERS."""
    if cfg.name not in OPTIMIZERS:
        raise OptimizerError(f"optimizer.name={cfg.name!r} is unknown; choose one of {OPTIMIZERS}")
    if float(cfg.learning_rate) <= 0:
        raise OptimizerError(f"optimizer.learning_rate={cfg.learning_rate} must be > 0")
    schedule = learning_rate_schedule(cfg, total_steps)
    make = optax.adamw if cfg.name == "adamw" else optax.lamb
    core = make(
        schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay,
        mask=decay_mask,
    )
    parts = [core]
    if cfg.grad_clip_norm and cfg.grad_clip_norm > 0:
        parts.insert(0, optax.clip_by_global_norm(cfg.grad_clip_norm))
    return optax.chain(*parts), schedule
