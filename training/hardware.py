"""Peak FLOP/s per device, the denominator of MFU.

Accelerators: the vendors' dense (no sparsity) bf16 peaks. CPUs have no
published number worth trusting, so the peak is measured: the throughput of a
large fp32 matmul compiled by XLA on this machine, all cores.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp

# Substring of jax.Device.device_kind -> dense bf16 FLOP/s.
PEAK_BF16_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L4": 121e12,
    "A10": 125e12,
    "V100": 125e12,
    "TPU v6": 918e12,
    "TPU v5p": 459e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v4": 275e12,
    "TPU v3": 123e12,
}


@functools.cache
def measured_matmul_flops(size: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of a size^3 fp32 matmul on the default device (best of `repeats`)."""
    a = jnp.ones((size, size), jnp.float32)
    matmul = jax.jit(lambda x: x @ x)
    matmul(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def peak_flops_per_device(device: jax.Device | None = None) -> float:
    device = device or jax.devices()[0]
    if device.platform == "cpu":
        # Forced host devices share the same cores: divide the machine's rate.
        return measured_matmul_flops() / len(jax.local_devices())
    for name, flops in PEAK_BF16_FLOPS.items():
        if name.lower() in device.device_kind.lower():
            return flops
    return measured_matmul_flops()
