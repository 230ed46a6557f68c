"""The pure, jit-compiled train and eval steps of pretraining (MLM) and GLUE
fine-tuning (classification and regression), side by side.

One train step serves both: an *objective* turns (model, params, batch) into sums
(loss_sum, weight, and e.g. correct), and `weights(batch)` gives the per-example
weights whose global sum normalises the loss. Metrics leave the step as sums plus
that denominator, so they average correctly over micro-batches, devices and hosts.
A pretraining objective also says what its sums become (`train_scalars`,
`eval_scalars`): the loop (training/pretrain_loop.py) logs those and names none itself.

Einsum and shape letters: the one legend in attention/__init__.py. Here the
classifier's classes are written out as `classes`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from training.optimizer import with_learning_rate

Batch = dict[str, jax.Array]


def mlm_sums(logits: jax.Array, targets: jax.Array, weights: jax.Array) -> dict[str, jax.Array]:
    """Cross-entropy and accuracy sums over the real MLM targets: (B, P, vocab), (B, P), (B, P)."""
    losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)
    correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
    return {
        "loss_sum": jnp.sum(losses * weights),
        "correct": jnp.sum(correct * weights),
        "weight": jnp.sum(weights),
    }


def model_outputs(model, params, batch: Batch, deterministic: bool, rng=None):
    rngs = None if rng is None else {"dropout": rng}
    return model.apply(
        {"params": params},
        batch["input_ids"],
        batch["token_type_ids"],
        batch["attention_mask"],
        batch["masked_positions"],
        deterministic=deterministic,
        rngs=rngs,
    )


class MLMObjective:
    """BertForMaskedLM: cross-entropy over the P masked positions (B, P, vocab).

    Its metrics live here once: the sums a step returns (`sum_names`, mlm_sums) and the
    scalars derived from them, a train step's and the held-out eval's. The loop needs
    "loss" among the first and "eval_loss" among the second (the final record, and the
    checkpoint kept as best)."""

    sum_names = ("loss_sum", "correct", "weight")

    @staticmethod
    def weights(batch: Batch) -> jax.Array:
        return batch["masked_weights"]

    @staticmethod
    def sums(model, params, batch: Batch, deterministic: bool, rng=None):
        out = model_outputs(model, params, batch, deterministic, rng)
        return mlm_sums(out["mlm_logits"], batch["masked_ids"], batch["masked_weights"])

    @staticmethod
    def train_scalars(sums: dict[str, Any]) -> dict[str, float]:
        """A train step's loss and accuracy over its real targets (none: divided by 1)."""
        weight = max(float(sums["weight"]), 1.0)
        return {"loss": float(sums["loss_sum"]) / weight,
                "mlm_accuracy": float(sums["correct"]) / weight}

    @staticmethod
    def eval_scalars(totals: dict[str, float]) -> dict[str, float]:
        """Held-out loss, accuracy and perplexity from the sums over every eval batch;
        empty when they hold no target (never a 0 loss)."""
        if totals["weight"] == 0:
            return {}
        loss = totals["loss_sum"] / totals["weight"]
        return {"eval_loss": loss, "eval_accuracy": totals["correct"] / totals["weight"],
                "eval_perplexity": float(np.exp(min(loss, 50.0)))}


class ClassifierObjective:
    """BertForSequenceClassification: cross-entropy over the classes, or squared error
    for a regression task (one output, STS-B), weighted per example (B,)."""

    sum_names = ("loss_sum", "weight")

    def __init__(self, regression: bool):
        self.regression = regression

    @staticmethod
    def weights(batch: Batch) -> jax.Array:
        return batch["weights"]

    def sums(self, model, params, batch: Batch, deterministic: bool, rng=None):
        logits = classifier_logits(model, params, batch, deterministic, rng)  # (B, classes)
        if self.regression:
            losses = jnp.square(logits[:, 0] - batch["labels"])
        else:
            losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
        return {"loss_sum": jnp.sum(losses * batch["weights"]),
                "weight": jnp.sum(batch["weights"])}


def classifier_logits(model, params, batch: Batch, deterministic: bool, rng=None):
    rngs = None if rng is None else {"dropout": rng}
    return model.apply({"params": params}, batch["input_ids"], batch["token_type_ids"],
                       batch["attention_mask"], deterministic=deterministic, rngs=rngs)


def make_predict_step(model, regression: bool, prepare_params=lambda params: params):
    """predict(params, batch) -> (B,) scores (regression) or class ids."""

    def predict(params, batch: Batch) -> jax.Array:
        logits = classifier_logits(model, prepare_params(params), batch, deterministic=True)
        return logits[:, 0] if regression else jnp.argmax(logits, axis=-1)

    return predict


class SpanObjective:
    """BertForQuestionAnswering: the mean of the start and end cross-entropies over the
    window's tokens (BERT's run_squad.py), weighted per window (B,). Padding is masked
    out of the softmax (BERT's is over all max_seq_length positions), so a window's loss
    does not depend on how far its batch is padded: length buckets change nothing."""

    sum_names = ("loss_sum", "weight")

    @staticmethod
    def weights(batch: Batch) -> jax.Array:
        return batch["weights"]

    def sums(self, model, params, batch: Batch, deterministic: bool, rng=None):
        logits = span_logits(model, params, batch, deterministic, rng)  # (B, T, 2)
        losses = sum(optax.softmax_cross_entropy_with_integer_labels(logits[..., i],
                                                                     batch[name])
                     for i, name in enumerate(("start_positions", "end_positions"))) / 2
        return {"loss_sum": jnp.sum(losses * batch["weights"]),
                "weight": jnp.sum(batch["weights"])}


def span_logits(model, params, batch: Batch, deterministic: bool, rng=None) -> jax.Array:
    logits = classifier_logits(model, params, batch, deterministic, rng)
    padding = (batch["attention_mask"] == 0)[..., None]
    return jnp.where(padding, jnp.finfo(logits.dtype).min, logits)


def make_span_predict_step(model, prepare_params=lambda params: params):
    """predict(params, batch) -> (B, T, 2) start and end logits (padding at the minimum)."""

    def predict(params, batch: Batch) -> jax.Array:
        return span_logits(model, prepare_params(params), batch, deterministic=True)

    return predict


# config.dropout_prng -> the jax.random.key implementation that draws dropout masks (the
# batch's masking, input_pipeline/device_masking.py, stays on threefry: its draws are the
# data). rbg and unsafe_rbg draw with XLA's RngBitGenerator: other bits than threefry, and
# not the same bits on CPU, GPU and TPU; under jax.vmap over a batch of keys they draw
# from the first key only (JAX's documented caveat; the step never vmaps dropout keys:
# micro-batches, scanned layers and talking-heads chunks fold an index into the key under
# lax.scan). unsafe_rbg also derives keys (fold_in) with RngBitGenerator, untested for
# independence. threefry_gpu_kernel is threefry with jax_threefry_gpu_kernel_lowering:
# on GPU each threefry call becomes one kernel instead of the hash's unrolled rounds in
# the program (faster to compile), and the bits are the same, so it may resume a
# threefry run and a threefry run may resume it; on CPU and TPU the flag changes nothing.
DROPOUT_PRNGS = {"threefry": "threefry2x32", "threefry_gpu_kernel": "threefry2x32",
                 "rbg": "rbg", "unsafe_rbg": "unsafe_rbg"}
DEFAULT_DROPOUT_PRNG = "threefry"  # a run or checkpoint without the field drew with it


def dropout_prng_identity(name: str | None) -> str:
    """The masks a dropout_prng draws, as a resume compares them: threefry_gpu_kernel is
    threefry; None (a config from before the field) is threefry; an unknown name is a
    ValueError naming the field."""
    name = DEFAULT_DROPOUT_PRNG if name is None else str(name)
    if name not in DROPOUT_PRNGS:
        raise ValueError(f"dropout_prng={name!r} is unknown; choose one of "
                         f"{' | '.join(DROPOUT_PRNGS)}")
    return "threefry" if DROPOUT_PRNGS[name] == "threefry2x32" else name


def use_dropout_prng(dropout_prng: str = DEFAULT_DROPOUT_PRNG) -> str:
    """jax.random.key's impl for a dropout_prng, before a step using it is traced.
    threefry_gpu_kernel sets jax_threefry_gpu_kernel_lowering for the process: every
    threefry draw, the batch's masking too, then lowers to the kernel, with the same bits."""
    dropout_prng_identity(dropout_prng)  # an unknown name: one error naming the field
    if dropout_prng == "threefry_gpu_kernel":
        jax.config.update("jax_threefry_gpu_kernel_lowering", True)
    return DROPOUT_PRNGS[dropout_prng]


def global_norm(tree: Any) -> jax.Array:
    return optax.global_norm(tree)


# The batch key of a dropout seed given at run time (make_train_step's seed=None).
DROPOUT_SEED = "dropout_seed"


def make_train_step(model, optimizer: optax.GradientTransformation, schedule, seed: int | None,
                    grad_accum_steps: int = 1, skip_nonfinite: bool = False,
                    prepare_params=lambda params: params, masker=None,
                    objective=None, dropout_prng: str = DEFAULT_DROPOUT_PRNG):
    """Returns train_step(state, batch) -> (state, metrics); state = {step, params, opt_state}.

    `seed`: the dropout masks' seed. None: every batch carries it as batch[DROPOUT_SEED]
    (an int32 scalar), so runs that differ only in their seed share one compiled step
    (a fine-tuning grid compiles once per rate, not once per run); the masks are the
    same bits as with the constant.

    `objective`: MLMObjective (pretraining, the default) or ClassifierObjective (GLUE).
    `prepare_params` maps stored params to their compute layout (e.g. the FSDP
    all-gather of training/sharding.fsdp_gather); gradients flow back through it.
    `masker` (input_pipeline.device_masking.DeviceMasker) masks unmasked host batches
    inside the step; None: the batch arrives masked. `dropout_prng`: the PRNG of the
    dropout masks (DROPOUT_PRNGS).
    """

    objective = objective or MLMObjective()
    impl = use_dropout_prng(dropout_prng)

    def loss_and_sums(params, batch, rng, denominator):
        sums = objective.sums(model, prepare_params(params), batch, deterministic=False,
                              rng=rng)
        # Normalised here, by the whole global batch's target count, rather than by
        # dividing every gradient afterwards: one less pass over all parameters.
        return sums["loss_sum"] / denominator, sums

    grad_fn = jax.grad(loss_and_sums, has_aux=True)

    def train_step(state, batch: Batch):
        dropout_seed = seed
        if seed is None:
            batch = dict(batch)
            if DROPOUT_SEED not in batch:
                raise ValueError(f"make_train_step(seed=None): the batch has no {DROPOUT_SEED}")
            dropout_seed = batch.pop(DROPOUT_SEED)
        if masker is not None:
            batch = masker(batch)
        # The dropout key is a function of (seed, step): a resumed run draws the same masks.
        rng = jax.random.fold_in(jax.random.key(dropout_seed, impl=impl), state["step"])
        # Mean over every real target of the global batch (all micro-batches).
        denominator = jnp.maximum(jnp.sum(objective.weights(batch)), 1.0)
        grads, sums = accumulated_grads(grad_fn, state["params"], batch, rng, denominator,
                                        grad_accum_steps, objective.sum_names)
        return apply_update(state, grads, sums, optimizer, schedule, skip_nonfinite)

    return train_step


def accumulated_grads(grad_fn, params: Any, batch: Batch, rng: jax.Array,
                      denominator: jax.Array, grad_accum_steps: int,
                      sum_names: tuple[str, ...]) -> tuple[Any, dict[str, jax.Array]]:
    """(gradients, sums) of the whole batch, over `grad_accum_steps` micro-batches in a
    scan when there are several (micro-batch i's dropout key folds i into `rng`)."""
    if grad_accum_steps == 1:
        return grad_fn(params, batch, rng, denominator)
    micro = jax.tree.map(
        lambda x: x.reshape(grad_accum_steps, x.shape[0] // grad_accum_steps, *x.shape[1:]),
        batch)

    def accumulate(carry, inputs):
        index, micro_batch = inputs
        g, s = grad_fn(params, micro_batch, jax.random.fold_in(rng, index), denominator)
        return jax.tree.map(jnp.add, carry, (g, s)), None

    zeros = (jax.tree.map(jnp.zeros_like, params),
             {k: jnp.zeros((), jnp.float32) for k in sum_names})
    (grads, sums), _ = jax.lax.scan(accumulate, zeros, (jnp.arange(grad_accum_steps), micro))
    return grads, sums


def apply_update(state: dict[str, Any], grads: Any, sums: dict[str, jax.Array],
                 optimizer: optax.GradientTransformation, schedule,
                 skip_nonfinite: bool) -> tuple[dict[str, Any], dict[str, jax.Array]]:
    """The optimizer's update of `state`, and the step's metrics (sums, norms, rate, and
    whether everything stayed finite)."""
    # The rate comes from the step, not from optax's counter: a skipped update must
    # not shift the schedule (the logged and the applied rate stay the same).
    learning_rate = schedule(state["step"])
    updates, opt_state = optimizer.update(
        grads, with_learning_rate(state["opt_state"], learning_rate), state["params"])
    params = optax.apply_updates(state["params"], updates)
    grad_norm = global_norm(grads)
    # The update too: an infinite learning rate (or moments that overflow) turns
    # finite gradients into non-finite parameters, which must never be kept or saved.
    finite = (jnp.isfinite(sums["loss_sum"]) & jnp.isfinite(grad_norm)
              & all_finite((params, opt_state)))
    new_state = {"step": state["step"] + 1, "params": params, "opt_state": opt_state}
    if skip_nonfinite:
        # Keep the old params/optimizer state but advance the step (the data moves on).
        new_state = {
            "step": state["step"] + 1,
            "params": jax.tree.map(lambda n, o: jnp.where(finite, n, o), params,
                                   state["params"]),
            "opt_state": jax.tree.map(lambda n, o: jnp.where(finite, n, o), opt_state,
                                      state["opt_state"]),
        }
    metrics = {**sums, "grad_norm": grad_norm, "param_norm": global_norm(params),
               "learning_rate": learning_rate, "finite": finite}
    return new_state, metrics


def all_finite(tree: Any) -> jax.Array:
    """True when every floating-point value in `tree` is finite (integer leaves, such as
    an optimizer's step count, are skipped)."""
    checks = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
    return jnp.all(jnp.stack(checks)) if checks else jnp.asarray(True)


def initial_health() -> dict[str, jax.Array]:
    """Device-side record of non-finite steps: the first one (0: none) and how many."""
    return {"first_nonfinite": jnp.zeros((), jnp.int32), "skipped": jnp.zeros((), jnp.int32)}


@jax.jit
def track_health(health: dict[str, jax.Array], finite: jax.Array, step) -> dict[str, jax.Array]:
    """Folds one step's `finite` flag in on the device, so the loop need not read it."""
    bad = jnp.logical_not(finite)
    first = jnp.where((health["first_nonfinite"] == 0) & bad, step, health["first_nonfinite"])
    return {"first_nonfinite": first.astype(jnp.int32),
            "skipped": health["skipped"] + bad.astype(jnp.int32)}


def make_eval_step(model, prepare_params=lambda params: params, masker=None,
                   objective=None):
    """eval_step(params, batch) -> the objective's sums (default MLMObjective: over the
    batch's real targets), without dropout."""
    objective = objective or MLMObjective()

    def eval_step(params, batch: Batch) -> dict[str, jax.Array]:
        if masker is not None:
            batch = masker(batch)
        return objective.sums(model, prepare_params(params), batch, deterministic=True)

    return eval_step
