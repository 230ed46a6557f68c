"""Metric writers: TensorBoard event files (tensorboardX, no TensorFlow) and a
console progress line. Only process 0 writes; other processes get a no-op."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import jax

from common.console import console  # noqa: F401  (re-exported: metrics.console)


def flat_hparams(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> {'model.hidden_size': 256, ...} with TensorBoard-safe values."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_hparams(value, f"{name}."))
        elif isinstance(value, bool | int | float | str):
            out[name] = value
        else:
            out[name] = str(value)
    return out


def _summary_writer_class():
    """tensorboardX's SummaryWriter, imported without torch.

    tensorboardX's writer imports torch wherever it is installed (the test extra installs
    it), only to name torch.Tensor in its type hints: 1.4 s of every run's start. Hiding
    torch for that one import leaves the writer on numpy, which is all this project logs;
    torch stays importable afterwards, and a process that imported it already keeps it.
    """
    hide = "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None  # `import torch` raises ImportError while this is set
    try:
        from tensorboardX import SummaryWriter
    finally:
        if hide:
            del sys.modules["torch"]
    return SummaryWriter


class MetricWriter:
    def __init__(self, logdir: str, enabled: bool | None = None):
        self.enabled = jax.process_index() == 0 if enabled is None else enabled
        self.writer = None
        if self.enabled:
            SummaryWriter = _summary_writer_class()
            os.makedirs(logdir, exist_ok=True)
            self.writer = SummaryWriter(logdir=logdir, flush_secs=10)

    def write_config(self, config: Mapping[str, Any]) -> None:
        if not self.writer:
            return
        text = json.dumps(config, indent=2, sort_keys=True, default=str)
        self.writer.add_text("config", f"```\n{text}\n```", 0)
        self.writer.add_hparams(flat_hparams(config), {}, name="hparams")

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        if not self.writer:
            return
        for name, value in values.items():
            self.writer.add_scalar(name, float(value), step)

    def flush(self) -> None:
        if self.writer:
            self.writer.flush()

    def close(self) -> None:
        if self.writer:
            self.writer.close()


class Progress:
    """Console line: step, the given metrics, steps/s (examples/s with
    `examples_per_step`) and the ETA, after `prefix` (a fine-tuning run's task, rate and
    seed).

    The first line's steps include compiling the step, so the rate (and the ETA) are
    measured from the first line on, and shown from the second: an ETA from a window
    that holds the compilation would be far too long."""

    def __init__(self, total_steps: int, first_step: int = 0, prefix: str = "",
                 examples_per_step: int | None = None):
        self.total = total_steps
        self.start_step, self.start_time = first_step, time.time()
        self.since: tuple[int, float] | None = None  # (step, time) of the first line
        self.prefix = prefix
        self.examples_per_step = examples_per_step

    def line(self, step: int, values: Mapping[str, float]) -> str:
        now = time.time()
        shown = " ".join(f"{k}={v:.4g}" for k, v in values.items())
        head = f"{self.prefix}step {step}/{self.total} {shown}"
        if self.since is None:
            self.since = (step, now)
            return (f"{head} (first {step - self.start_step} steps "
                    f"with compilation: {now - self.start_time:.1f} s; ETA at the next line)")
        since_step, since_time = self.since
        elapsed, done = now - since_time, step - since_step
        rate = done / elapsed if elapsed > 0 and done > 0 else math.nan
        eta = (self.total - step) / rate if rate == rate and rate > 0 else math.nan
        eta_text = time.strftime("%H:%M:%S", time.gmtime(eta)) if eta == eta else "?"
        examples = (f", {rate * self.examples_per_step:.1f} examples/s"
                    if self.examples_per_step else "")
        return f"{head} ({rate:.2f} steps/s{examples}, ETA {eta_text})"

    def log(self, step: int, values: Mapping[str, float]) -> None:
        console(self.line(step, values))


