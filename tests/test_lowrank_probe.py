"""scripts/lowrank_probe.py: its logits agree with the attention modules, its masked
batching of key sizes is exact, its rank function matches numpy and the theory, its
fits show the bottleneck at n - 1, and the script runs end to end.

Einsum and shape letters: the one legend in attention/__init__.py. B counts runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import REPO, tiny_model_config

from analysis import lowrank_probe as probe
from attention.multi_head import MultiHeadAttention
from attention.talking_heads import TalkingHeadsAttention

N_TOKENS = 6
WIDTH = 2 * N_TOKENS


def module_weights(module_cls, cfg, x, wq, wk, mix=None) -> np.ndarray:
    """Attention weights [H, T, S] read out of a real module's forward pass.

    Values are x Wv = I_n per head and the output projection copies head g's n value
    columns to output columns g*n .. g*n + n - 1, so the output is the weights.
    """
    n, width = x.shape
    heads = cfg.num_value_heads
    right_inverse = x.T @ np.linalg.inv(x @ x.T)  # x @ right_inverse = I_n
    out = np.zeros((heads, n, width))
    for g in range(heads):
        out[g, :, g * n:(g + 1) * n] = np.eye(n)
    logit_heads, key_size = wq.shape[1:]
    params = {
        "query": {"kernel": wq, "bias": np.zeros((logit_heads, key_size))},
        "key": {"kernel": wk, "bias": np.zeros((logit_heads, key_size))},
        "value": {"kernel": np.repeat(right_inverse[:, None], heads, axis=1),
                  "bias": np.zeros((heads, n))},
        "out": {"kernel": out, "bias": np.zeros(width)},
    }
    if mix is not None:
        params["logits_mixing"] = mix
    params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), params)
    y = module_cls(cfg).apply({"params": params}, jnp.asarray(x)[None], jnp.ones((1, n), bool))
    return np.asarray(y[0])[:, :heads * n].reshape(n, heads, n).transpose(1, 0, 2)


@pytest.mark.parametrize("talking", [False, True])
def test_probe_logits_agree_with_the_attention_modules(talking):
    rng = np.random.default_rng(0)
    key_size = 3
    x = rng.normal(size=(N_TOKENS, WIDTH))
    if talking:  # 3 logit heads mixed into 2 softmax heads (P_l only), as in the reference
        logit_heads, heads = 3, 2
        cfg = tiny_model_config(hidden_size=WIDTH, num_heads=heads, key_size=key_size,
                          value_size=N_TOKENS, attention="talking_heads",
                          talking_heads=dict(num_logit_heads=logit_heads, projections="logits"))
        mix = rng.normal(size=(logit_heads, heads))
        module = TalkingHeadsAttention
    else:
        logit_heads = heads = 2
        cfg = tiny_model_config(hidden_size=WIDTH, num_heads=heads, key_size=key_size,
                          value_size=N_TOKENS)
        mix, module = None, MultiHeadAttention
    wq, wk = (0.5 * rng.normal(size=(WIDTH, logit_heads, key_size)) for _ in range(2))
    expected = module_weights(module, cfg, x, wq, wk, mix)
    logits = probe.mixed_logits(jnp.asarray(x, jnp.float32), jnp.asarray(wq, jnp.float32),
                                jnp.asarray(wk, jnp.float32),
                                None if mix is None else jnp.asarray(mix, jnp.float32))
    np.testing.assert_allclose(jax.nn.softmax(logits, axis=-1), expected, atol=1e-5)


def test_single_head_logits_against_numpy():
    rng = np.random.default_rng(1)
    x, wq, wk = (rng.normal(size=s).astype(np.float32)
                 for s in [(N_TOKENS, WIDTH), (WIDTH, 4), (WIDTH, 4)])
    np.testing.assert_allclose(probe.single_head_logits(x, wq, wk),
                               (x @ wq) @ (x @ wk).T / 2.0, rtol=1e-5, atol=1e-5)


def test_masked_key_sizes_fit_exactly_like_their_live_columns():
    """Zero-padding to a common key size (one compile per sweep) changes nothing."""
    rng = np.random.default_rng(2)
    runs, live, padded = 2, 2, 5
    xs = probe.random_inputs(rng, runs, N_TOKENS, WIDTH)
    targets = probe.random_targets(rng, runs, 1, N_TOKENS)
    params = probe.init_params(rng, runs, WIDTH, 1, padded, None)
    masks = np.tile((np.arange(padded) < live).astype(np.float32), (runs, 1))
    full = probe.fit(params, xs, targets, masks, steps=60, lr=0.05)
    small = {k: v[..., :live] for k, v in params.items()}
    alone = probe.fit(small, xs, targets, np.ones((runs, live), np.float32), steps=60, lr=0.05)
    for name in ("q", "k"):
        np.testing.assert_allclose(full[name][..., :live], alone[name], rtol=1e-4, atol=1e-5)
        # Masked columns get zero gradient, so Adam leaves them at their init.
        np.testing.assert_array_equal(full[name][..., live:], params[name][..., live:])
        assert not np.allclose(alone[name], small[name])  # the fit did move the live ones


def test_centred_rank_is_min_of_key_size_and_n_minus_one():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(N_TOKENS, WIDTH))
    for key_size in range(1, WIDTH + 1):
        logits = (x @ rng.normal(size=(WIDTH, key_size))) @ (x @ rng.normal(
            size=(WIDTH, key_size))).T
        centred = logits - logits.mean(axis=1, keepdims=True)
        rank = probe.centred_rank(logits)
        assert rank == min(key_size, N_TOKENS - 1) == np.linalg.matrix_rank(centred)
    # The per-query shift is invisible to softmax and to the centred rank.
    shifted = logits + rng.normal(size=(N_TOKENS, 1))
    assert probe.centred_rank(shifted) == probe.centred_rank(logits)
    assert probe.centred_rank(np.zeros((N_TOKENS, N_TOKENS))) == 0


@pytest.mark.parametrize("heads,key_size", [(2, 2), (3, 2), (2, 3)])
def test_talking_heads_mixed_logits_exceed_the_single_head_rank(heads, key_size):
    """A mixed softmax head combines h rank-K matrices: rank min(hK, n - 1) > K."""
    rng = np.random.default_rng(4)
    runs = 3
    xs = probe.random_inputs(rng, runs, N_TOKENS, WIDTH)
    masks = np.ones((runs, key_size), np.float32)
    mixed = probe.init_params(rng, runs, WIDTH, heads, key_size, 1)
    unmixed = probe.init_params(rng, runs, WIDTH, heads, key_size, None)
    mixed_logits = probe.float64_logits(mixed, xs, masks)  # [B, 1, T, S]
    head_logits = probe.float64_logits(unmixed, xs, masks)  # [B, N, T, S]
    expected = min(heads * key_size, N_TOKENS - 1)
    assert expected > key_size
    for b in range(runs):
        assert probe.centred_rank(mixed_logits[b, 0]) == expected
        for n in range(heads):
            assert probe.centred_rank(head_logits[b, n]) == key_size
    kept, dropped = probe.rank_gap(mixed_logits[0, 0])
    assert kept > 1e3 * probe.RANK_RTOL and dropped < 1e-3 * probe.RANK_RTOL


@pytest.mark.slow
def test_fit_reaches_targets_from_key_size_n_minus_one_and_not_below():
    rng = np.random.default_rng(5)
    trials, restarts = 2, 1
    xs = probe.random_inputs(rng, trials, N_TOKENS, WIDTH)
    targets = probe.random_targets(rng, trials, 1, N_TOKENS)
    common = dict(steps=1500, lr=0.05, trials=trials, restarts=restarts)
    single = {r["key_size"]: r for r in probe.sweep(rng, xs, targets, [1, 4, 5, 6], 1, None,
                                                    **common)}
    best = {k: r["max_abs_error"]["best_worst"] for k, r in single.items()}
    assert best[5] < 1e-4 and best[6] < 1e-4  # K = n - 1 already suffices
    assert single[4]["max_abs_error"]["best_mean"] > 100 * best[5]  # K = n - 2 does not
    assert single[1]["max_abs_error"]["best_mean"] > 0.03
    assert [single[k]["rank_fit"]["max"] for k in (1, 4, 5, 6)] == [1, 4, 5, 5]

    # Talking heads: 3 heads of key size 2 mixed reach the target (3*2 >= n - 1), one
    # such head alone (K = 2) cannot, and neither can 3 heads of key size 1 mixed.
    talking = {r["key_size"]: r for r in probe.sweep(rng, xs, targets, [1, 2], 3, 1, **common)}
    alone = probe.sweep(rng, xs, targets, [2], 1, None, **common)[0]
    assert talking[2]["max_abs_error"]["best_worst"] < 1e-4
    assert alone["max_abs_error"]["best_mean"] > 0.01
    assert talking[1]["max_abs_error"]["best_mean"] > 1e-3
    assert talking[2]["rank_fit"]["min"] == N_TOKENS - 1 and alone["rank_fit"]["max"] == 2


@pytest.mark.slow
def test_script_runs_end_to_end(tmp_path):
    out, doc = tmp_path / "figures", tmp_path / "LOWRANK_PROBE.md"
    cmd = [sys.executable, os.path.join(REPO, "scripts", "lowrank_probe.py"), "--n=4",
           "--steps=40", "--trials=1", "--restarts=2", "--heads=2", f"--out={out}",
           f"--doc={doc}"]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| K | K/n |" in result.stdout
    results = json.loads((out / "lowrank_probe.json").read_text())
    assert [r["key_size"] for r in results["single_head"]] == list(range(1, 9))
    assert [r["total_key_size"] for r in results["talking_heads"]] == [2, 4, 6, 8]
    assert results["settings"]["width"] == 8 and "--n=4" in results["command"]
    assert (out / "lowrank_probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = doc.read_text()
    assert "--steps=40" in text and "](lowrank_probe.png)" not in text  # figure is in figures/
    assert "](figures/lowrank_probe.png)" in text


@pytest.mark.slow
def test_script_rejects_a_narrow_width(tmp_path):
    cmd = [sys.executable, os.path.join(REPO, "scripts", "lowrank_probe.py"), "--n=6",
           "--width=4", f"--out={tmp_path}", "--doc="]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "--width=4 must be >= --n=6" in result.stderr
    assert not list(tmp_path.iterdir())
