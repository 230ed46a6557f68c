"""The two layouts of the encoder's parameters, and the one conversion between them.

Unrolled (model.scan_layers=false): one subtree per layer, `encoder/layer_0/...`,
`encoder/layer_1/...`. Scanned (true): one subtree `encoder/layers/...` whose every
leaf has the layers stacked along a new leading axis (logical axis `layers`, never
sharded). Layer i of the scanned tree is leaf[i] of every leaf, so the conversion is
exact both ways and the two models compute the same function with the same numbers
(tests/test_scan_layers.py).

Every reader of parameters that cares which layer is which (checkpoints' consumers:
warm starts, fine-tuning, Hugging Face export and import, the mixing-matrix study)
brings a tree to the layout it needs with `to_layout`, and a tree says which layout
it holds (`is_scanned`), so a checkpoint of either layout can start a run of either.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

STACKED = "layers"  # encoder/layers: the scanned layout's one subtree
LAYER = re.compile(r"^layer_(\d+)$")  # encoder/layer_i: the unrolled layout's


def _layer_keys(node: dict[str, Any]) -> list[str]:
    """The layer_i keys of an encoder node, in layer order (layer_10 after layer_9)."""
    found = sorted((int(m.group(1)), k) for k in node if (m := LAYER.match(k)))
    if [i for i, _ in found] != list(range(len(found))):
        raise ValueError(f"encoder layers {[k for _, k in found]} are not layer_0..layer_N-1")
    return [k for _, k in found]


def _is_encoder(node: Any) -> bool:
    return isinstance(node, dict) and (STACKED in node or "layer_0" in node)


def _stack(leaves: list[Any]) -> Any:
    if all(isinstance(x, np.ndarray | np.generic) for x in leaves):
        return np.stack(leaves)
    return jnp.stack(leaves)


def stack_layers(encoder: dict[str, Any]) -> dict[str, Any]:
    """{layer_0: T, ..., layer_{L-1}: T, other} -> {layers: T with [L, ...] leaves, other}."""
    keys = _layer_keys(encoder)
    if not keys:
        return encoder
    rest = {k: v for k, v in encoder.items() if k not in keys}
    stacked = jax.tree.map(lambda *xs: _stack(list(xs)), *[encoder[k] for k in keys])
    return {**rest, STACKED: stacked}


def unstack_layers(encoder: dict[str, Any]) -> dict[str, Any]:
    """{layers: T with [L, ...] leaves, other} -> {layer_0: T, ..., other}."""
    if STACKED not in encoder:
        return encoder
    stacked = encoder[STACKED]
    depth = {int(np.shape(x)[0]) for x in jax.tree.leaves(stacked)}
    if len(depth) != 1:
        raise ValueError(f"encoder/{STACKED}: leaves stack {sorted(depth)} layers, not one "
                         f"count")
    (num_layers,) = depth
    rest = {k: v for k, v in encoder.items() if k != STACKED}
    layers = {f"layer_{i}": jax.tree.map(lambda x, i=i: x[i], stacked)
              for i in range(num_layers)}
    return {**rest, **layers}


def is_scanned(tree: Any) -> bool:
    """True when the tree's encoder holds `layers` (stacked), False when layer_i or when
    it holds no encoder at all."""
    if not isinstance(tree, dict):
        return False
    if _is_encoder(tree):
        return STACKED in tree
    return any(is_scanned(v) for v in tree.values())


def to_layout(tree: Any, scanned: bool) -> Any:
    """The tree (params, a gradient, any nested dict holding an `encoder` somewhere)
    with its encoder in the scanned or the unrolled layout; everything else as is."""
    if not isinstance(tree, dict):
        return tree
    if _is_encoder(tree):
        return stack_layers(tree) if scanned else unstack_layers(tree)
    return {k: to_layout(v, scanned) for k, v in tree.items()}


def like(tree: Any, reference: Any) -> Any:
    """`tree` in the layout `reference` holds (e.g. a checkpoint's params brought to a
    freshly initialised model's)."""
    return to_layout(tree, is_scanned(reference))
