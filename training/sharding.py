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
    # The stacked layer axis of scanned layers (model.scan_layers): every device holds
    # every layer's slice of a weight, as it holds every layer when they are unrolled.
    ("layers", None),
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


def host_batch_to_global(batch: dict[str, np.ndarray], mesh: Mesh, rules) -> dict[str, Any]:
    """This process's rows -> one global array per feature, sharded on the batch axis."""
    return {
        k: jax.make_array_from_process_local_data(batch_sharding(mesh, rules, v.ndim), v)
        for k, v in batch.items()
    }


def host_value_to_global(value: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """An array every process holds whole (e.g. loaded weights) -> laid out as `sharding`."""
    value = np.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def with_values(params: Any, values: dict[str, np.ndarray], shardings: Any) -> Any:
    """`params` with the leaves that `values` names ('bert/encoder/layer_0/...' paths)
    replaced by those arrays, each laid out as its own leaf's sharding; the other leaves
    stay as they are (a fresh head, say)."""
    import flax

    flat = flax.traverse_util.flatten_dict(params, sep="/")
    flat_shardings = flax.traverse_util.flatten_dict(shardings, sep="/")
    for name, value in values.items():
        flat[name] = host_value_to_global(np.asarray(value), flat_shardings[name])
    return flax.traverse_util.unflatten_dict(flat, sep="/")


def to_host(array: jax.Array) -> np.ndarray:
    """A global array, whole, on every process (an all-gather when several)."""
    if jax.process_count() == 1:
        return np.asarray(jax.device_get(array))
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


class ShardedState:
    """A train state {step, params, opt_state} laid out on a mesh by the logical rules.

    From `init_state(rng)` (which may return boxed, logically annotated params) it
    derives, once: the shapes (jax.eval_shape, nothing is computed), the shardings,
    `abstract` ShapeDtypeStructs carrying them (to restore checkpoints onto), `init`
    (rng -> state created directly sharded), and `gather` (params -> their compute
    layout, fsdp gathered; see fsdp_gather).
    """

    def __init__(self, init_state, mesh: Mesh, rules, rng: jax.Array):
        boxed = jax.eval_shape(init_state, rng)
        self.mesh, self.rules = mesh, rules
        self.shardings = logical_shardings(boxed, mesh, rules)
        self.abstract = jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
            nn.unbox(boxed), self.shardings)
        self.gather = fsdp_gather(without_axis(self.shardings["params"]))
        with mesh, nn.logical_axis_rules(rules):
            self.init = jax.jit(lambda r: nn.unbox(init_state(r)), out_shardings=self.shardings)

    def jit_step(self, step_fn):
        """step_fn(state, batch) -> (state, metrics), jitted with the state donated."""
        with self.mesh, nn.logical_axis_rules(self.rules):
            return jax.jit(step_fn, in_shardings=(self.shardings, None),
                           out_shardings=(self.shardings, None), donate_argnums=(0,))
