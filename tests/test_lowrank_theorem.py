"""Theorem 1 of the low-rank bottleneck paper, checked through our attention module.

Setting (ours is the paper's transposed): x is [n, d] (n tokens of width d,
full row rank), a single head with key size K, attention weights
W[t, s] = softmax_s(x_t Wq . x_s Wk / sqrt(K)). Softmax ignores a per-query
shift, so W = P exactly when the logits equal log P up to such shifts.

- K = d >= n (Theorem 1): with R = x^T (x x^T)^-1 (so x R = I), Wq = sqrt(K) R C R^T
  and Wk = I give logits C = log P for any positive row-stochastic P.
- K <= n - 2: logits = x Wq Wk^T x^T have rank <= K, and centring each row
  (removing the per-query shift) keeps rank <= K; a generic log P has centred
  rank n - 1 > K, so no weights reach it. Checked for random weights and for
  weights found by gradient descent.
- K = n - 1 is the edge: a per-query shift c with det(log P + c 1^T) = 0 exists
  (matrix determinant lemma), so rank n - 1 logits suffice; built explicitly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import tiny_model_config

from attention.multi_head import MultiHeadAttention

N_TOKENS = 6


def random_positive_stochastic(rng: np.random.Generator, n: int) -> np.ndarray:
    p = rng.uniform(0.05, 1.0, size=(n, n))
    return p / p.sum(axis=1, keepdims=True)  # rows: queries; each sums to 1 over keys


def head_params(x_width: int, wq: np.ndarray, wk: np.ndarray, x: np.ndarray) -> dict:
    """One head whose value/output projections copy the attention weights out.

    Values are V = x Wv with x Wv = I_n, so output row t is W[t, :] in its first n
    coordinates; this reads the weights through the module's own forward pass.
    """
    n, key_size = x.shape[0], wq.shape[1]
    right_inverse = x.T @ np.linalg.inv(x @ x.T)  # [d, n], x @ right_inverse = I
    out = np.zeros((1, n, x_width))
    out[0, :, :n] = np.eye(n)
    zeros = np.zeros
    return {
        "query": {"kernel": wq.reshape(x_width, 1, key_size), "bias": zeros((1, key_size))},
        "key": {"kernel": wk.reshape(x_width, 1, key_size), "bias": zeros((1, key_size))},
        "value": {"kernel": right_inverse.reshape(x_width, 1, n), "bias": zeros((1, n))},
        "out": {"kernel": out, "bias": zeros(x_width)},
    }


def attention_weights(x: np.ndarray, wq: np.ndarray, wk: np.ndarray) -> np.ndarray:
    n, d = x.shape
    cfg = tiny_model_config(hidden_size=d, num_heads=1, key_size=wq.shape[1], value_size=n)
    params = jax.tree.map(jnp.asarray, head_params(d, wq, wk, x))
    out = MultiHeadAttention(cfg).apply(
        {"params": params}, jnp.asarray(x)[None], jnp.ones((1, n), bool), True)
    return np.asarray(out[0, :, :n])


@pytest.mark.parametrize("width", [N_TOKENS, N_TOKENS + 4])
def test_theorem1_key_size_at_least_n_reproduces_any_stochastic_matrix(width):
    rng = np.random.default_rng(width)
    x = rng.normal(size=(N_TOKENS, width))
    assert np.linalg.matrix_rank(x) == N_TOKENS
    target = random_positive_stochastic(rng, N_TOKENS)
    right_inverse = x.T @ np.linalg.inv(x @ x.T)
    logits = np.log(target)
    wq = np.sqrt(width) * right_inverse @ logits @ right_inverse.T  # key size K = d
    wk = np.eye(width)
    np.testing.assert_allclose(attention_weights(x, wq, wk), target, atol=1e-5)


def centred_rank(log_weights: np.ndarray, tol: float = 1e-4) -> int:
    """Rank after removing each query's shift (what softmax cannot see)."""
    centred = log_weights - log_weights.mean(axis=1, keepdims=True)
    s = np.linalg.svd(centred, compute_uv=False)
    return int((s > tol * s[0]).sum())


def test_key_size_below_n_minus_one_cannot_reach_a_generic_target():
    rng = np.random.default_rng(0)
    width, key_size = 8, N_TOKENS - 2
    x = rng.normal(size=(N_TOKENS, width))
    target = random_positive_stochastic(rng, N_TOKENS)
    assert centred_rank(np.log(target)) == N_TOKENS - 1
    # The invariant holds for any weights: reachable matrices have centred rank <= K.
    for _ in range(5):
        # Moderate scale keeps the weights away from 0, where fp32 logs are noisy.
        wq, wk = (0.4 * rng.normal(size=(width, key_size)) for _ in range(2))
        assert centred_rank(np.log(attention_weights(x, wq, wk))) <= key_size

    # Gradient descent on KL(target || W) reaches the target with key size n and
    # n - 1, and stalls visibly short of it with a small key size. The rate decays to 0:
    # at a constant 0.05 Adam circles the target, and its error at step 3000 (0 to 0.007)
    # depended on the compiler's rounding.
    def fit(k: int) -> float:
        def kl(w):
            logits = (x @ w["q"]) @ (x @ w["k"]).T / np.sqrt(k)
            return jnp.sum(target * (jnp.log(target) - jax.nn.log_softmax(logits, axis=-1)))

        w = {name: jnp.asarray(0.3 * rng.normal(size=(width, k))) for name in ("q", "k")}
        opt = optax.adam(optax.cosine_decay_schedule(0.05, 3000))
        state = opt.init(w)

        @jax.jit
        def step(w, state):
            updates, state = opt.update(jax.grad(kl)(w), state)
            return optax.apply_updates(w, updates), state

        for _ in range(3000):
            w, state = step(w, state)
        logits = (x @ w["q"]) @ (x @ w["k"]).T / np.sqrt(k)
        return float(jnp.abs(jax.nn.softmax(logits, axis=-1) - target).max())

    assert fit(N_TOKENS) < 5e-3
    assert fit(N_TOKENS - 1) < 5e-3
    assert fit(2) > 0.02


def test_key_size_n_minus_one_suffices_thanks_to_softmax_shift_invariance():
    rng = np.random.default_rng(3)
    width, key_size = 8, N_TOKENS - 1
    x = rng.normal(size=(N_TOKENS, width))
    target = random_positive_stochastic(rng, N_TOKENS)
    logits = np.log(target)
    ones = np.ones(N_TOKENS)
    # det(L + c 1^T) = det(L) (1 + 1^T L^-1 c): the same shift a for every query,
    # a = -1 / (1^T L^-1 1), makes the logits singular without changing softmax.
    shift = -1.0 / (ones @ np.linalg.solve(logits, ones))
    shifted = logits + shift
    assert np.linalg.matrix_rank(shifted, tol=1e-8) == N_TOKENS - 1
    right_inverse = x.T @ np.linalg.inv(x @ x.T)
    full = right_inverse @ shifted @ right_inverse.T  # [d, d], rank n - 1
    left, singular, right_t = np.linalg.svd(full)
    wq = np.sqrt(key_size) * left[:, :key_size] * singular[:key_size]
    wk = right_t[:key_size].T
    np.testing.assert_allclose(attention_weights(x, wq, wk), target, atol=1e-5)
