"""Device mesh and logical-axis sharding: one code path for 1 CPU, 8 GPUs, a pod.

Parameters and activations are annotated with logical axis names (batch,
length, embed, heads, kv, mlp, vocab); the config's rules map each name onto
mesh axes (data, fsdp, tensor). A mesh axis used twice in one array is left
unsharded the second time (Flax's rule), so activations (batch, length, embed)
shard the batch over data+fsdp and keep the width whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

DEFAULT_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
)


class ShardingError(ValueError):
    """A mesh that does not fit the devices; the message names the config field."""


def mesh_shape(spec: dict[str, int], num_devices: int) -> tuple[int, ...]:
    """Resolves {'data': -1, 'fsdp': 2, 'tensor': 1}: -1 takes the remaining devices."""
    unknown = sorted(set(spec) - set(MESH_AXES))
    if unknown:
        raise ShardingError(f"mesh: unknown axes {unknown}; axes are {MESH_AXES}")
    sizes = [int(spec.get(axis, 1)) for axis in MESH_AXES]
    fill = [i for i, s in enumerate(sizes) if s == -1]
    if len(fill) > 1:
        raise ShardingError("mesh: at most one axis may be -1")
    fixed = int(np.prod([s for s in sizes if s != -1]))
    if any(s == 0 or s < -1 for s in sizes) or num_devices % fixed:
        shown = dict(zip(MESH_AXES, sizes, strict=True))
        raise ShardingError(f"mesh={shown} does not fit {num_devices} devices")
    if fill:
        sizes[fill[0]] = num_devices // fixed
    if int(np.prod(sizes)) != num_devices:
        raise ShardingError(
            f"mesh={dict(zip(MESH_AXES, sizes, strict=True))} uses {int(np.prod(sizes))} of "
            f"{num_devices} devices; make the product equal or use -1 for one axis"
        )
    return tuple(sizes)


def make_mesh(spec: dict[str, int], devices: Sequence[jax.Device] | None = None) -> Mesh:
    devices = list(devices if devices is not None else jax.devices())
    shape = mesh_shape(spec, len(devices))
    return Mesh(np.asarray(devices).reshape(shape), MESH_AXES)


def rules_from_config(rules: Sequence[Sequence[Any]] | None) -> tuple[tuple[str, Any], ...]:
    if not rules:
        return DEFAULT_RULES
    out = []
    for name, axes in rules:
        out.append((str(name), tuple(axes) if isinstance(axes, list) else axes))
    return tuple(out)


def logical_shardings(boxed_tree: Any, mesh: Mesh, rules) -> Any:
    """NamedShardings for a tree of nn.Partitioned (boxed) values or shapes."""
    specs = nn.get_partition_spec(boxed_tree)
    return nn.logical_to_mesh_sharding(specs, mesh, rules)


def batch_sharding(mesh: Mesh, rules, ndim: int = 2) -> NamedSharding:
    """Shards the leading (batch) axis as the 'batch' rule says; the rest replicated."""
    axes = nn.logical_to_mesh_axes(("batch",) + (None,) * (ndim - 1), rules)
    return NamedSharding(mesh, axes)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_divisor(mesh: Mesh, rules) -> int:
    """How many ways the batch axis is split: global batch sizes must divide by it."""
    spec = nn.logical_to_mesh_axes(("batch",), rules)[0]
    if spec is None:
        return 1
    names = spec if isinstance(spec, tuple) else (spec,)
    return int(np.prod([mesh.shape[n] for n in names]))


def without_axis(shardings: Any, axis: str = "fsdp") -> Any:
    """The same shardings with one mesh axis dropped (that dimension replicated)."""

    def drop(sharding: NamedSharding) -> NamedSharding:
        def strip(entry):
            if entry == axis:
                return None
            if isinstance(entry, tuple):
                kept = tuple(e for e in entry if e != axis)
                return kept if len(kept) > 1 else (kept[0] if kept else None)
            return entry

        return NamedSharding(sharding.mesh, PartitionSpec(*(strip(e) for e in sharding.spec)))

    return jax.tree.map(drop, shardings)


def fsdp_gather(compute_shardings: Any):
    """Returns params -> params constrained to their compute layout (fsdp gathered).

    FSDP stores parameters sharded over 'fsdp' and gathers them for the forward
    pass; saying so explicitly matters: left to infer it, XLA's SPMD partitioner
    (jax 0.10.2, CPU) produced wrong gradients when the batch and a weight's
    contraction dimension were both split over 'fsdp' (tests/test_sharding.py).
    """

    def gather(params: Any) -> Any:
        return jax.tree.map(jax.lax.with_sharding_constraint, params, compute_shardings)

    return gather
