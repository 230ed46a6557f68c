"""What a pretraining ran on, recorded at each start, so that a rerun or a resumed run
that does not repeat its numbers can be traced to what changed.

XLA compiles for the host it runs on and the packages in the environment: two machines
of one type with the same code repeat a run bit for bit, but a resume in an environment
with another jaxlib, another instruction set or another version of the model code need
not. WORKDIR/environment.json (training/results.RunStarts) keeps one entry per start
that trains; a resume whose environment differs from the previous start's says which
fields changed in one warning line.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import time

import jax

from training.results import ResultsError, RunStarts

# The packages whose versions change what a step computes or how it is compiled.
PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "tokenizers")
# The project's code that a pretraining step runs (the model, the attention variants, the
# input pipeline and the loop); scripts, tests and docs are left out so that a commit of
# results does not read as a change of code.
CODE_DIRS = ("attention", "models", "training", "input_pipeline", "common", "configs")
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Fields shown in the record but not compared on resume: the commit moves with every
# commit of results, and the code hash already says whether the code changed.
NOT_COMPARED = ("commit",)


def describe() -> dict[str, str]:
    """This process's environment, as strings (the record's values)."""
    devices, cpu = jax.devices(), cpuinfo()
    env = {"python": platform.python_version()}
    env.update({name: package_version(name) for name in PACKAGES})
    env.update({
        "backend": jax.default_backend(),
        "devices": f"{len(devices)} x {devices[0].device_kind}, "
                   f"{jax.process_count()} process(es)",
        "host_cpu": host_cpu(cpu),
        "cpu_features": cpu_features_digest(cpu),
        "cpus": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                    else os.cpu_count()),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "code": code_digest(),
        "commit": git_commit(),
    })
    return env


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cpuinfo() -> dict[str, str]:
    """/proc/cpuinfo's fields of its first processor (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def host_cpu(cpu: dict[str, str] | None = None) -> str:
    cpu = cpuinfo() if cpu is None else cpu
    return cpu.get("model name") or platform.processor() or platform.machine()


def cpu_features_digest(cpu: dict[str, str]) -> str:
    """A short digest of the host's instruction-set flags: XLA's CPU code generation
    uses what the host offers (AVX-512 or not), so one CPU model name can hide two."""
    flags = cpu.get("flags")
    if flags is None:
        return "unknown"
    return hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:12]


def code_digest(root: str = PROJECT_ROOT) -> str:
    """A digest of the .py files under CODE_DIRS and train.py (their paths and bytes)."""
    digest = hashlib.sha256()
    paths = [os.path.join(root, "train.py")]
    for top in CODE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            paths += [os.path.join(dirpath, n) for n in filenames if n.endswith(".py")]
    for path in sorted(paths):
        if os.path.isfile(path):
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(f.read() + b"\0")
    return digest.hexdigest()[:12]


def git_commit(root: str = PROJECT_ROOT) -> str:
    """The checkout's commit, '+changes' when tracked files differ from it."""
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                                  check=True, timeout=10).stdout.strip()

        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return commit + ("+changes" if changed else "")


def differences(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """'FIELD OLD -> NEW' for each compared field that changed."""
    return [f"{key} {before.get(key, '(not recorded)')} -> {now.get(key, '(not recorded)')}"
            for key in sorted(set(before) | set(now))
            if key not in NOT_COMPARED and before.get(key) != now.get(key)]


def record_start(workdir: str, step: int) -> list[str]:
    """Appends this start to WORKDIR/environment.json; returns the warning lines: a
    resume whose previous start ran in another environment, a resume with no record of
    the steps before it, a damaged record (set aside)."""
    now = describe()
    warnings = []
    try:
        record = RunStarts.read(workdir) or RunStarts()
    except ResultsError as e:  # a diagnostic record never stops a run: keep it aside
        aside = RunStarts.path(workdir) + f".damaged-{time.strftime('%Y%m%d-%H%M%S')}"
        os.replace(RunStarts.path(workdir), aside)
        record = RunStarts()
        warnings.append(f"warning: {e}; moved to {aside}, a new record begun")
    before = record.starts[-1] if record.starts else None
    if step > 0 and before is None:
        warnings.append(f"warning: resuming at step {step}; the environment of the steps "
                        f"before it is not recorded in {RunStarts.path(workdir)}")
    elif step > 0 and (changed := differences(before["environment"], now)):
        warnings.append(f"warning: resuming at step {step} in another environment than the "
                        f"start at step {before['step']} ({'; '.join(changed)}): the run need "
                        f"not repeat an uninterrupted one bit for bit")
    record.with_start(step, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), now
                      ).write(workdir)
    return warnings
