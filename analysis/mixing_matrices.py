"""What a talking-heads run learnt in its mixing matrices: does each head still mostly
talk to itself, or is it a spread mix of all heads?

The command line is scripts/mixing_matrices.py.

For P_l[N, H] (logits_mixing) and P_w[H, G] (weights_mixing) of every layer, two
shares of each output head's squared weights (one column of P), averaged over the
output heads:
- own: the share from the input head of the same index (square P only): 1 for the
  identity, about 1/heads for a fan-in normal draw;
- top: the share from its largest input head: 1 for a permutation (each output is one
  input head), lower the more evenly the heads are mixed.
Beside them, the same shares of a fan-in normal draw of that shape (the reference
init; the mean over 10,000 numpy draws), so "still as mixed as at the start" reads off
directly. Nothing is retrained: the newest (or --step) checkpoint is read.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from models import layout
from models.hf_export import full_mixing

MIXINGS = ("logits_mixing", "weights_mixing")


def column_shares(mixings: np.ndarray) -> dict[str, float]:
    """{own, top}: shares of each column's squared weights, averaged over the columns
    of one matrix [in, out] or of a stack of them [..., in, out] (own only if square)."""
    squared = np.asarray(mixings, dtype=np.float64) ** 2
    totals = squared.sum(axis=-2)
    shares = {"top": float(np.mean(squared.max(axis=-2) / totals))}
    if squared.shape[-2] == squared.shape[-1]:
        diagonal = np.diagonal(squared, axis1=-2, axis2=-1)
        shares["own"] = float(np.mean(diagonal / totals))
    return shares


@functools.cache
def fan_in_shares(shape: tuple[int, int], draws: int = 10_000, seed: int = 0
                  ) -> dict[str, float]:
    """The same shares for the reference init, normal with stddev 1/sqrt(fan_in) (the
    scale cancels in a share, so standard normal draws)."""
    return column_shares(np.random.default_rng(seed).standard_normal((draws, *shape)))


def find_mixings(tree: Any, path: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """{'layer_0/logits_mixing': P, ...}: every mixing matrix in a params tree, named by
    the path below the encoder (scanned layers are named layer_i too)."""
    found: dict[str, np.ndarray] = {}
    if not path:
        tree = layout.to_layout(tree, scanned=False)
    if isinstance(tree, dict):
        for key, value in tree.items():
            found.update(find_mixings(value, (*path, str(key))))
    elif path and path[-1] in MIXINGS:
        start = path.index("encoder") + 1 if "encoder" in path else 0
        kept = [p for p in path[start:] if p != "attention"]
        found["/".join(kept)] = full_mixing(path[-1], tree)  # grouped: block-diagonal
    return found


def read_mixings(workdir: str, step: int | None) -> tuple[int, dict[str, np.ndarray]]:
    from training.checkpoint_reader import restore_run

    state, _, restored_step, _ = restore_run(workdir, step)
    params = state.get("params", {}) if isinstance(state, dict) else {}
    mixings = find_mixings(params)
    if not mixings:
        raise ValueError(f"{workdir}: its checkpoint at step {restored_step} has no "
                         f"talking-heads mixing matrices (not a talking-heads run?)")
    return restored_step, mixings


def describe(workdir: str, step: int | None) -> dict[str, Any]:
    restored_step, mixings = read_mixings(workdir, step)
    return {"step": restored_step,
            "matrices": {name: {"shape": list(p.shape), **column_shares(p),
                                "fan_in_init": fan_in_shares(p.shape)}
                         for name, p in mixings.items()}}
