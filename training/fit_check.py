"""Does a config's train step fit a TPU slice, and how fast should it be? Answered on a
CPU host, with nothing allocated: the exact jitted step train.py runs (compile_for_mesh:
the same shardings, donation, optimizer, masking on the device, remat setting) is
compiled ahead of time for the slice's topology through libtpu, and XLA's own
memory_analysis() and cost_analysis() are read from it. An out-of-memory shows here, at
compile time, not after a queue for a pod (MaxText's train_compile.py does the same).

GPUs: libtpu cannot compile for them; `cpu-N` compiles on N host devices for the
sharding plan and the collectives, and time and memory then come from the analytic
model with the GPU's figures (an estimate, said so in the report).

Needs libtpu (`pip install -e ".[tpu-plan]"`); it must be told there is no TPU host
(TPU_ACCELERATOR_TYPE, TPU_WORKER_HOSTNAMES), which prepare_environment does.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any

import numpy as np

GiB = 1024**3


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    hbm_bytes: float  # per chip
    peak_bf16_flops: float  # dense, per chip
    hbm_bytes_per_s: float
    source: str


# Per chip, from the vendors' pages (dense bf16; HBM as sold).
CHIPS = {
    "v4": Chip("TPU v4", 32 * GiB, 275e12, 1228e9, "cloud.google.com/tpu/docs/v4"),
    "v5e": Chip("TPU v5e", 16 * GiB, 197e12, 819e9, "cloud.google.com/tpu/docs/v5e"),
    "v5p": Chip("TPU v5p", 95 * GiB, 459e12, 2765e9, "cloud.google.com/tpu/docs/v5p"),
    "v6e": Chip("TPU v6e", 32 * GiB, 918e12, 1640e9, "cloud.google.com/tpu/docs/v6e"),
    "h100": Chip("H100 SXM", 80e9, 989e12, 3350e9, "nvidia.com/en-us/data-center/h100"),
    "h200": Chip("H200 SXM", 141e9, 989e12, 4800e9, "nvidia.com/en-us/data-center/h200"),
}

# TPU slices: chips -> the torus libtpu names (v4/v5p: 3D, two cores per chip, sold by
# cores; v5e/v6e: 2D, sold by chips).
_TORUS_3D = {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4), 64: (4, 4, 4),
             128: (4, 4, 8), 256: (4, 8, 8), 512: (8, 8, 8), 1024: (8, 8, 16),
             2048: (8, 16, 16)}
_TORUS_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8),
             128: (8, 16), 256: (16, 16)}


class FitCheckError(ValueError):
    """A topology or config the fit check cannot handle; the message says why."""


@dataclasses.dataclass(frozen=True)
class Topology:
    name: str  # as the user gave it: v4-32, v5e-16, h100-8, cpu-8
    chip: Chip | None  # None: cpu-N (no figures)
    chips: int
    libtpu_name: str | None  # e.g. "v4:2x4x4"; None off TPU
    chip_config: str = "default"
    host_bounds: tuple[int, ...] = (2, 2, 1)

    @property
    def is_tpu(self) -> bool:
        return self.libtpu_name is not None


def parse_topology(name: str) -> Topology:
    """v4-8 ... v4-4096 and v5p-N (N cores, 2 per chip), v5e-N and v6e-N (N chips),
    h100-N / h200-N (N GPUs: compiled on N host devices, figures from CHIPS), cpu-N."""
    match = re.fullmatch(r"(v4|v5p|v5e|v6e|h100|h200|cpu)-(\d+)", name.strip().lower())
    if not match:
        raise FitCheckError(f"--topology={name}: use v4-N, v5p-N (N cores), v5e-N, v6e-N "
                            f"(N chips), h100-N, h200-N or cpu-N")
    kind, count = match.group(1), int(match.group(2))
    if kind in ("v4", "v5p"):
        chips = count // 2
        if count % 2 or chips not in _TORUS_3D:
            raise FitCheckError(f"--topology={name}: {kind} slices have "
                                f"{', '.join(str(2 * c) for c in _TORUS_3D)} cores")
        torus = "x".join(map(str, _TORUS_3D[chips]))
        prefix = "v4" if kind == "v4" else "v5"
        return Topology(name, CHIPS[kind], chips, f"{prefix}:{torus}", "megacore")
    if kind in ("v5e", "v6e"):
        if count not in _TORUS_2D:
            raise FitCheckError(f"--topology={name}: {kind} slices have "
                                f"{', '.join(map(str, _TORUS_2D))} chips")
        torus = "x".join(map(str, _TORUS_2D[count]))
        bounds = (1, 1, 1) if count == 1 else (2, 2, 1)
        return Topology(name, CHIPS[kind], count, f"{kind}:{torus}", "default", bounds)
    return Topology(name, CHIPS.get(kind), count, None)


def prepare_environment(topology: Topology) -> None:
    """Before JAX starts a backend: stay on the CPU for everything but this compile, and
    tell libtpu there is no TPU host to find (without these two it logs an error per
    start and may try the TPU metadata server)."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # two fit checks at once
    if topology.is_tpu:
        os.environ.setdefault("TPU_ACCELERATOR_TYPE", topology.name)
        os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    elif topology.name.startswith(("cpu", "h100", "h200")):
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = (f"{flags} --xla_force_host_platform_device_count="
                                   f"{topology.chips}").strip()


def devices(topology: Topology) -> list[Any]:
    """The slice's devices (TPU: from libtpu's topology description, no hardware)."""
    import jax

    if not topology.is_tpu:
        found = jax.devices("cpu")
        if len(found) < topology.chips:
            raise FitCheckError(f"--topology={topology.name}: {len(found)} host devices; "
                                f"run in a fresh process (XLA_FLAGS is read at JAX's start)")
        return found[:topology.chips]
    try:
        import libtpu  # noqa: F401
    except ImportError:
        raise FitCheckError('libtpu is not installed: pip install -e ".[tpu-plan]"') from None
    from jax.experimental.topologies import get_topology_desc

    return list(get_topology_desc(
        platform="tpu", topology_name=topology.libtpu_name,
        chip_config_name=topology.chip_config, chips_per_host_bounds=topology.host_bounds,
        num_slices=1).devices)


# -- the step, abstractly --------------------------------------------------------------
@dataclasses.dataclass
class Plan:
    """What was compiled: the model, the mesh, and the step's abstract arguments."""

    model_config: Any
    mesh: Any
    abstract_state: Any
    abstract_batch: dict[str, Any]
    lowered: Any
    analytic_flops: float  # the whole step, every chip (models/flops.py)
    analytic_bytes: float  # one chip's peak by models/memory.py (step_bytes)


def plan_step(config, topology: Topology) -> Plan:
    """Lowers train.py's jitted step for `config` on the slice (nothing is allocated)."""
    import jax

    from input_pipeline import packing
    from input_pipeline.device_masking import DeviceMasker
    from input_pipeline.tokenizer import SpecialIds
    from models import BertForMaskedLM
    from models.flops import flop_count
    from training import pretrain, sharding
    from training.optimizer import make_optimizer

    pretrain.validate(config)
    mesh = sharding.make_mesh(dict(config.mesh), devices(topology))
    rules = sharding.rules_from_config(config.logical_axis_rules)
    pretrain.check_batch_fits_mesh(config, mesh, rules)
    vocab = int(config.data.vocab_size)
    model_cfg = pretrain.model_config_for(config, vocab)
    model = BertForMaskedLM(model_cfg)
    optimizer, schedule = make_optimizer(config.optimizer, config.num_train_steps)
    data = config.data
    batch_size, seq_len, predictions = (config.batch_size, data.max_seq_length,
                                        data.max_predictions_per_seq)
    masker = None
    if data.masking == "device":  # special ids as BERT's vocabulary has them; the shapes matter
        masker = DeviceMasker(
            SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103), vocab, predictions,
            data.mask_prob, whole_word=data.whole_word_mask,
            continuation=np.zeros(vocab, bool) if data.whole_word_mask else None,
            mask_token_prob=data.mask_token_prob, random_token_prob=data.random_token_prob)
    compiled = pretrain.compile_for_mesh(model, optimizer, schedule, config, mesh, rules,
                                         masker)

    def feature(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype,
                                    sharding=sharding.batch_sharding(mesh, rules, len(shape)))

    ids = packing.token_dtype(vocab)
    if masker is not None:  # what input_pipeline/batches.py feeds each way, in its dtypes
        batch = {"input_ids": feature((batch_size, seq_len), ids),
                 "token_type_ids": feature((batch_size, seq_len), np.int8),
                 "attention_mask": feature((batch_size, seq_len), np.int8),
                 "mask_stream": feature((batch_size, 4), np.int32)}
    else:
        batch = {"input_ids": feature((batch_size, seq_len), np.int32),
                 "token_type_ids": feature((batch_size, seq_len), np.int32),
                 "attention_mask": feature((batch_size, seq_len), np.int32),
                 "masked_positions": feature((batch_size, predictions), np.int32),
                 "masked_ids": feature((batch_size, predictions), np.int32),
                 "masked_weights": feature((batch_size, predictions), np.float32)}
    import flax.linen as nn

    with mesh, nn.logical_axis_rules(rules):
        lowered = compiled.train_step.lower(compiled.abstract_state, batch)
    flops = flop_count(model_cfg, seq_len).train_step(batch_size * seq_len,
                                                      batch_size * predictions)
    peak = analytic_peak(config, model_cfg, sharding.batch_divisor(mesh, rules),
                         mesh.shape["fsdp"] * mesh.shape["tensor"])
    return Plan(model_cfg, mesh, compiled.abstract_state, batch, lowered, flops, peak)


def analytic_peak(config, model_cfg, batch_shards: int, parameter_shards: int) -> float:
    """models/memory.py's peak per chip: the batch split `batch_shards` ways, the
    parameters `parameter_shards` ways (fsdp x tensor)."""
    from models.memory import step_bytes

    return step_bytes(model_cfg, config.batch_size / batch_shards, config.data.max_seq_length,
                      config.data.max_predictions_per_seq, parameter_shards).total


def shard_bytes(tree: Any) -> int:
    """Bytes one device holds of abstract arrays laid out by their shardings."""
    import jax

    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


# -- the report ------------------------------------------------------------------------
_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                "collective-permute")
_ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
                  "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_ARRAY = re.compile(r"\b(" + "|".join(_ELEMENT_BYTES) + r")\[([\d,]*)\]")
# "%name = TYPE op(" where TYPE is an array or a tuple with layouts, e.g. f32[8]{0:T(128)}
_OP = re.compile(r"=\s*([^=]+?)\s+(" + "|".join(_COLLECTIVES) + r")(-start)?\(")


def collectives(hlo_text: str) -> dict[str, tuple[int, int]]:
    """{kind: (count, bytes of their results)} in a compiled module's HLO text (an async
    pair counts once, at its -start)."""
    found: dict[str, list[int]] = {}
    for line in hlo_text.splitlines():
        match = _OP.search(line)
        if not match:
            continue
        size = sum(math.prod(int(d) for d in dims.split(",") if d) * _ELEMENT_BYTES[kind]
                   for kind, dims in _ARRAY.findall(match.group(1)))
        count, total = found.get(match.group(2), [0, 0])
        found[match.group(2)] = [count + 1, total + size]
    return {k: (v[0], v[1]) for k, v in sorted(found.items())}


_PARAMETER = re.compile(r"=\s*(\w+)\[([\d,]*)\]\S*\s+parameter\(\d+\)")


def entry_parameters(hlo_text: str) -> list[tuple[str, tuple[int, ...]]]:
    """(element type, per-device shape) of each argument the compiled step takes: the
    shard shapes XLA's partitioner chose (arguments jit found unused are not there)."""
    entry = hlo_text[hlo_text.index("\nENTRY"):]
    entry = entry[:entry.find("\n}") + 1]
    return [(kind, tuple(int(d) for d in dims.split(",") if d))
            for kind, dims in _PARAMETER.findall(entry)]


def parameter_bytes(parameters: list[tuple[str, tuple[int, ...]]]) -> int:
    return sum(math.prod(shape) * _ELEMENT_BYTES[kind] for kind, shape in parameters)


def _shard_arrays(tree: Any) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, per-device shape) of each abstract array in `tree`."""
    import jax

    return [(np.dtype(leaf.dtype).name,
             tuple(leaf.sharding.shard_shape(leaf.shape) if getattr(leaf, "sharding", None)
                   is not None else leaf.shape)) for leaf in jax.tree.leaves(tree)]


def aliased_bytes(donated: list[tuple[str, tuple[int, ...]]],
                  outputs: list[tuple[str, tuple[int, ...]]]) -> int:
    """Bytes of the outputs that can reuse a donated argument's buffer (same dtype and
    per-device shape, one output per argument): what XLA's alias_size counts."""
    from collections import Counter

    free = Counter(donated)
    reused = []
    for array in outputs:
        if free[array]:
            free[array] -= 1
            reused.append(array)
    return _array_bytes(reused)


def _array_bytes(arrays: list[tuple[str, tuple[int, ...]]]) -> int:
    return sum(math.prod(shape) * np.dtype(kind).itemsize for kind, shape in arrays)


@dataclasses.dataclass
class Report:
    topology: Topology
    mesh_shape: dict[str, int]
    arguments: int  # bytes per chip, as XLA allocates them (TPU: padded to its tiles)
    unpadded_arguments: int  # the same arguments' bytes at their shard shapes
    outputs: int
    temporaries: int
    aliased: int  # donated arguments reused for outputs
    xla_flops: float  # per chip
    analytic_flops: float  # per chip
    analytic_bytes: float  # per chip: models/memory.py's estimate of the peak
    bytes_accessed: float  # per chip
    collectives: dict[str, tuple[int, int]]
    estimated: bool  # memory and time from the analytic model (GPU), not XLA's TPU plan
    # The TPU compiler's own refusal ("Ran out of memory on HBM"): (bytes it needed for
    # temporaries, bytes it had for them). Its "available" is the chip's HBM less a
    # reserve, the same whatever the arguments (v4: 30.75G of 32 GiB); `temporaries` is
    # then its need, and the arguments, outputs and aliasing are ours from the shardings.
    out_of_memory: tuple[float, float] | None = None
    # model.scan_layers: XLA's cost analysis counts a loop's body once, so its FLOPs and
    # bytes leave out all layers but one (BERT-base: 0.13 of the analytic FLOPs).
    scanned: bool = False
    # The compiled program's own bytes on the chip (unknown when XLA refused the step: 0)
    generated_code: int = 0

    @property
    def peak(self) -> int:
        """Arguments + outputs not aliased to a donated argument + temporaries + generated
        code, per chip."""
        return (self.arguments + self.outputs - self.aliased + self.temporaries
                + self.generated_code)

    @property
    def judged_peak(self) -> float:
        """What fitting is judged on: XLA's TPU plan; for a GPU (estimated) the analytic
        peak, since the CPU compile's buffer plan is not the GPU compiler's."""
        return self.analytic_bytes if self.estimated else self.peak

    @property
    def fits(self) -> bool:
        chip = self.topology.chip
        return self.out_of_memory is None and (chip is None
                                               or self.judged_peak <= chip.hbm_bytes)

    @property
    def missing(self) -> float:
        """Bytes per chip short of fitting (0 when it fits): the peak (arguments +
        outputs not aliased + temporaries + generated code) less the chip's memory: for
        a step XLA refused, less the HBM it says is available (the chip's less its
        reserve; its own shortfall, temporaries - available, leaves out the arguments)."""
        if self.out_of_memory is not None:
            return max(0.0, self.peak - self.out_of_memory[1])
        chip = self.topology.chip
        return max(0.0, self.judged_peak - chip.hbm_bytes) if chip else 0.0

    def missing_line(self) -> str:
        chip = self.topology.chip
        memory = (f"the {self.out_of_memory[1] / GiB:.2f} GiB XLA leaves of "
                  f"{chip.hbm_bytes / GiB:.2f} GiB" if self.out_of_memory is not None
                  else f"{chip.hbm_bytes / GiB:.2f} GiB")
        counted = ("analytic peak" if self.estimated else
                   "arguments + outputs not aliased + temporaries + generated code")
        return (f"does not fit: {self.missing / GiB:.2f} GiB missing per chip ({counted} "
                f"- {memory} of {chip.name} memory)")

    def step_seconds(self) -> float | None:
        """Roofline: the slower of compute at the chip's peak and memory traffic at its
        HBM bandwidth; collectives overlap or add (not modelled: a lower bound)."""
        chip = self.topology.chip
        if chip is None:
            return None
        # Scanned layers: XLA's count holds one layer; the analytic count holds them all
        # (its bytes stay a lower bound).
        flops = max(self.xla_flops, self.analytic_flops) if self.scanned else self.xla_flops
        return max(flops / chip.peak_bf16_flops, self.bytes_accessed / chip.hbm_bytes_per_s)

    def mfu(self) -> float | None:
        seconds = self.step_seconds()
        chip = self.topology.chip
        return None if seconds is None else self.analytic_flops / seconds / chip.peak_bf16_flops

    def lines(self) -> list[str]:
        chip = self.topology.chip
        gib = lambda b: f"{b / GiB:.2f} GiB" if abs(b) >= GiB / 10 else f"{b / 2**20:.1f} MiB"  # noqa: E731
        out = [f"{self.topology.name}: {self.topology.chips} chips "
               f"({chip.name if chip else 'host devices'}), mesh {self.mesh_shape}"]
        if self.out_of_memory is not None:
            needed, available = self.out_of_memory
            return out + [
                f"XLA's TPU compiler refused the step: its temporaries need {gib(needed)}, "
                f"more than the {gib(available)} of HBM it leaves them (that figure is the "
                f"same whatever the arguments)",
                f"per chip: arguments {gib(self.arguments)} (state and batch at their shard "
                f"shapes), outputs not aliased {gib(self.outputs - self.aliased)}, "
                f"temporaries {gib(self.temporaries)}, generated code not known (XLA "
                f"stopped before it), peak >= {gib(self.peak)}",
                f"analytic FLOPs per chip: {self.analytic_flops:.3e}, analytic peak "
                f"{gib(self.analytic_bytes)} (models/memory.py)",
                self.missing_line()]
        if self.estimated:
            out.append("(an estimate: fitting is judged on the analytic peak at the GPU's "
                       "memory; FLOPs, bytes and collectives are the CPU compile's plan for "
                       "the same sharding, time is that at the GPU's figures; not XLA's GPU "
                       "plan)")
        padding = self.arguments - self.unpadded_arguments
        out += [f"per chip: arguments {gib(self.arguments)} ({gib(padding)} of it tile "
                f"padding), outputs {gib(self.outputs)}, "
                f"temporaries {gib(self.temporaries)}, donated {gib(self.aliased)}, "
                f"generated code {gib(self.generated_code)}, peak {gib(self.peak)}"
                + (f" of {gib(chip.hbm_bytes)} HBM ({chip.source})" if chip else ""),
                f"analytic peak per chip (state + gradients + saved activations, "
                f"models/memory.py): {gib(self.analytic_bytes)} (XLA / analytic "
                f"{self.peak / self.analytic_bytes:.2f})",
                f"FLOPs per chip: XLA {self.xla_flops:.3e}, analytic {self.analytic_flops:.3e} "
                f"(XLA / analytic {self.xla_flops / self.analytic_flops:.2f})",
                f"bytes accessed per chip: {self.bytes_accessed:.3e}"
                + (" (scanned layers: XLA counts the loop body once, so its FLOPs and bytes "
                   "hold one layer; the roofline takes the analytic FLOPs, and its bytes "
                   "are a lower bound)" if self.scanned else ""),
                "collectives: " + (", ".join(f"{k} x{n} ({b / 2**20:.1f} MiB)" for k, (n, b)
                                             in self.collectives.items()) or "none")]
        seconds = self.step_seconds()
        if seconds is not None:
            out.append(f"roofline step time >= {seconds * 1e3:.3g} ms (peak "
                       f"{chip.peak_bf16_flops:.3g} FLOP/s, HBM {chip.hbm_bytes_per_s:.3g} "
                       f"B/s; collectives not counted), MFU <= {self.mfu():.0%}")
        if chip is not None:
            out.append("fits" if self.fits else self.missing_line())
        return out


# libtpu's compile-time refusal, e.g. "the total memory required for HLO temporaries
# (39.44G) exceeds available HBM (15.75G)"
_OUT_OF_MEMORY = re.compile(r"required for HLO temporaries \(([\d.]+[KMG]?)\) exceeds "
                            r"available HBM \(([\d.]+[KMG]?)\)")


def _gib_value(text: str) -> float:
    scale = {"K": 2**10, "M": 2**20, "G": GiB}.get(text[-1], 1)
    return float(text.rstrip("KMG")) * scale


def check(config, topology: Topology) -> Report:
    """Compiles and reads the plan: call prepare_environment(topology) first."""
    return report_of(plan_step(config, topology), topology)


def report_of(plan: Plan, topology: Topology, compiled: Any = None) -> Report:
    """The report of a lowered step, compiling it unless `compiled` is given."""
    try:
        compiled = compiled or plan.lowered.compile()
    except Exception as e:  # jax.errors.JaxRuntimeError; the TPU compiler's OOM is an answer
        refused = _OUT_OF_MEMORY.search(str(e))
        if refused is None:
            raise
        import jax

        state = shard_bytes(plan.abstract_state) + shard_bytes(plan.abstract_batch)
        arguments = _shard_arrays((plan.abstract_state, plan.abstract_batch))
        infos = jax.tree.leaves(plan.lowered.args_info)
        donated = [array for array, info in zip(arguments, infos, strict=True) if info.donated]
        outputs = _shard_arrays(plan.lowered.out_info)
        return Report(topology=topology, mesh_shape=dict(plan.mesh.shape), arguments=state,
                      unpadded_arguments=state, outputs=_array_bytes(outputs),
                      temporaries=int(_gib_value(refused.group(1))),
                      aliased=aliased_bytes(donated, outputs),
                      xla_flops=0.0, analytic_flops=plan.analytic_flops / topology.chips,
                      analytic_bytes=plan.analytic_bytes, bytes_accessed=0.0, collectives={},
                      estimated=False,
                      out_of_memory=(_gib_value(refused.group(1)),
                                     _gib_value(refused.group(2))))
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    chips = topology.chips
    text = compiled.as_text()
    return Report(
        topology=topology, mesh_shape=dict(plan.mesh.shape),
        arguments=int(memory.argument_size_in_bytes),
        unpadded_arguments=parameter_bytes(entry_parameters(text)),
        outputs=int(memory.output_size_in_bytes),
        temporaries=int(memory.temp_size_in_bytes), aliased=int(memory.alias_size_in_bytes),
        generated_code=int(memory.generated_code_size_in_bytes),
        xla_flops=float(cost.get("flops", 0.0)),
        analytic_flops=plan.analytic_flops / chips, analytic_bytes=plan.analytic_bytes,
        bytes_accessed=float(cost.get("bytes accessed", 0.0)),
        collectives=collectives(text),
        estimated=not topology.is_tpu, scanned=plan.model_config.scan_layers)


# -- a grid of rows --------------------------------------------------------------------
def to_json(report: Report, row: str, seconds: float, steps: int) -> dict[str, Any]:
    """One row's record for the scale table (scripts/fit_check.py --grid)."""
    step = report.step_seconds()
    return {"row": row, "topology": report.topology.name, "mesh": report.mesh_shape,
            "fits": report.fits, "peak_bytes": None if report.out_of_memory else report.peak,
            "missing_bytes": report.missing, "arguments_bytes": report.arguments,
            "temporaries_bytes": report.temporaries, "analytic_bytes": report.analytic_bytes,
            "xla_flops": report.xla_flops,
            "analytic_flops": report.analytic_flops, "collectives": report.collectives,
            "step_seconds": step if report.fits else None,
            "mfu": report.mfu() if report.fits else None,
            "hours_to_steps": step * steps / 3600 if report.fits and step else None,
            "steps": steps, "compile_seconds": seconds}


def scale_table(records: list[dict[str, Any]]) -> str:
    gib = lambda b: "-" if b is None else f"{b / GiB:.2f}"  # noqa: E731
    lines = ["| row | slice, mesh | fits | peak GiB/chip (missing) | analytic GiB | "
             "XLA / analytic FLOPs | roofline step ms | MFU <= | hours to steps | compile s |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in records:
        mesh = ",".join(f"{k}={v}" for k, v in r["mesh"].items() if v > 1) or "1 chip"
        ratio = f"{r['xla_flops'] / r['analytic_flops']:.2f}" if r["xla_flops"] else "-"
        lines.append(
            f"| {r['row']} | {r['topology']}, {mesh} | {'yes' if r['fits'] else 'no'} | "
            f"{gib(r['peak_bytes'])}" + (f" ({gib(r['missing_bytes'])} missing)"
                                         if not r["fits"] else "")
            + f" | {gib(r.get('analytic_bytes'))} | {ratio} | "
            + ("-" if r["step_seconds"] is None else f"{r['step_seconds'] * 1e3:.0f}")
            + " | " + ("-" if r["mfu"] is None else f"{r['mfu']:.0%}") + " | "
            + ("-" if r["hours_to_steps"] is None
               else f"{r['hours_to_steps']:.0f} ({r['steps']:,} steps)")
            + f" | {r['compile_seconds']:.0f} |")
    return "\n".join(lines)
