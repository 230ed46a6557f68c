"""Optimizers and schedules against numpy re-implementations of the references:
google-research/bert's AdamWeightDecayOptimizer and create_optimizer schedule, Hugging
Face's get_linear_schedule_with_warmup, and BERT-era LAMB (layer adaptation excluded
where weight decay is); plus the schedule under skipped non-finite updates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from training import steps
from training.optimizer import make_optimizer, with_learning_rate

PEAK, WARMUP, TOTAL, DECAY = 1e-2, 3, 10, 0.01


def opt_config(name: str, schedule: str = "linear", clip: float = 0.0):
    return ml_collections.ConfigDict(dict(
        name=name, learning_rate=PEAK, schedule=schedule, warmup_steps=WARMUP, b1=0.9,
        b2=0.999, eps=1e-6, weight_decay=DECAY, grad_clip_norm=clip))


def toy_params():
    """A layer's weight matrix, its zero bias and a LayerNorm scale."""
    rng = np.random.default_rng(0)
    return {"dense": {"kernel": rng.normal(size=(4, 3)).astype(np.float32),
                      "bias": np.zeros(3, np.float32)},
            "norm": {"scale": np.ones(3, np.float32)}}


def toy_grads(step: int):
    rng = np.random.default_rng(step + 1)
    return jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), toy_params())


def run_ours(name: str, schedule: str, num_steps: int):
    optimizer, lr = make_optimizer(opt_config(name, schedule), TOTAL)
    params = jax.tree.map(jnp.asarray, toy_params())
    state = optimizer.init(params)
    for step in range(num_steps):
        updates, state = optimizer.update(toy_grads(step), with_learning_rate(state, lr(step)),
                                          params)
        params = optax.apply_updates(params, updates)
    return jax.tree.map(np.asarray, params)


def run_numpy(rule: str, rates: list[float]):
    """The references, one parameter at a time. rule: bert_adamw | lamb."""
    out = {}
    for layer, leaves in toy_params().items():
        out[layer] = {}
        for name, w in leaves.items():
            w = w.astype(np.float64)
            m = np.zeros_like(w)
            v = np.zeros_like(w)
            decays = name == "kernel"  # BERT excludes bias and LayerNorm
            for step, lr in enumerate(rates):
                g = toy_grads(step)[layer][name]
                m = 0.9 * m + 0.1 * g
                v = 0.999 * v + 0.001 * g * g
                if rule == "lamb":
                    m_hat, v_hat = m / (1 - 0.9 ** (step + 1)), v / (1 - 0.999 ** (step + 1))
                    update = m_hat / (np.sqrt(v_hat) + 1e-6)
                else:  # AdamWeightDecayOptimizer: no bias correction
                    update = m / (np.sqrt(v) + 1e-6)
                if decays:
                    update = update + DECAY * w
                if rule == "lamb" and decays:
                    w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
                    update = update * (w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0)
                w = w - lr * update
            out[layer][name] = w
    return out


def bert_schedule(step: int) -> float:
    """google-research/bert create_optimizer, written out."""
    decayed = PEAK * (1 - min(step, TOTAL) / TOTAL)
    return PEAK * step / WARMUP if step < WARMUP else decayed


def hf_schedule(step: int) -> float:
    """transformers.get_linear_schedule_with_warmup, written out."""
    if step < WARMUP:
        return PEAK * step / WARMUP
    return PEAK * max(0.0, (TOTAL - step) / (TOTAL - WARMUP))


@pytest.mark.parametrize("name,reference", [("linear", hf_schedule),
                                            ("bert_linear", bert_schedule)])
def test_schedules_equal_their_references(name, reference):
    _, schedule = make_optimizer(opt_config("adamw", name), TOTAL)
    np.testing.assert_allclose([float(schedule(s)) for s in range(TOTAL + 1)],
                               [reference(s) for s in range(TOTAL + 1)], rtol=1e-6, atol=1e-9)


def test_bert_adamw_equals_google_research_bert():
    ours = run_ours("bert_adamw", "bert_linear", TOTAL)
    ref = run_numpy("bert_adamw", [bert_schedule(s) for s in range(TOTAL)])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), ours, ref)


def test_lamb_adapts_only_the_decayed_weights_and_biases_move():
    ours = run_ours("lamb", "linear", TOTAL)
    ref = run_numpy("lamb", [hf_schedule(s) for s in range(TOTAL)])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), ours, ref)
    # A trust ratio on the zero-initialised bias would keep it at ~lr^2.
    assert np.abs(ours["dense"]["bias"]).max() > 0.01


class _Quadratic:
    """A stand-in for BertForMaskedLM: logits are the parameters themselves."""

    def apply(self, variables, ids, types, mask, positions, deterministic, rngs):
        del types, mask, deterministic, rngs
        w = variables["params"]["w"]
        return {"mlm_logits": jnp.broadcast_to(w, (*positions.shape, w.shape[-1]))
                + 0.0 * ids[:, :1, None]}


def test_skipped_nonfinite_update_keeps_the_schedule_on_the_step():
    """nonfinite=skip: the update at step s applies schedule(s), whatever was skipped."""
    optimizer, schedule = make_optimizer(opt_config("adamw", "linear"), TOTAL)
    train_step = jax.jit(steps.make_train_step(_Quadratic(), optimizer, schedule, seed=0,
                                               skip_nonfinite=True))
    w0 = jnp.asarray(np.random.default_rng(0).normal(size=(1, 5)), jnp.float32)
    state = {"step": jnp.zeros((), jnp.int32), "params": {"w": w0},
             "opt_state": optimizer.init({"w": w0})}

    def batch(weight: float):
        return {"input_ids": jnp.ones((2, 4), jnp.int32),
                "token_type_ids": jnp.zeros((2, 4), jnp.int32),
                "attention_mask": jnp.ones((2, 4), jnp.int32),
                "masked_positions": jnp.zeros((2, 1), jnp.int32),
                "masked_ids": jnp.asarray([[1], [3]], jnp.int32),
                "masked_weights": jnp.full((2, 1), weight, jnp.float32)}

    skip = 2
    for step in range(TOTAL):
        state, metrics = train_step(state, batch(np.nan if step == skip else 1.0))
        assert bool(metrics["finite"]) == (step != skip)
        np.testing.assert_allclose(float(metrics["learning_rate"]), hf_schedule(step), rtol=1e-6)
    # Independent replay: optax AdamW at rate 1 gives the direction; scale by schedule(s).
    direction = optax.adamw(1.0, b1=0.9, b2=0.999, eps=1e-6, weight_decay=DECAY,
                            mask=lambda p: {"w": True})
    params, opt_state = {"w": w0}, direction.init({"w": w0})
    grad_fn = jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(
        jnp.broadcast_to(p["w"], (2, 5)), jnp.asarray([1, 3])).mean())
    for step in range(TOTAL):
        if step == skip:
            continue
        updates, opt_state = direction.update(grad_fn(params), opt_state, params)
        params = jax.tree.map(lambda p, u, s=step: p + hf_schedule(s) * u, params, updates)
    np.testing.assert_allclose(state["params"]["w"], params["w"], rtol=1e-5, atol=1e-7)
