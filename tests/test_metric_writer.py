"""training/metrics.MetricWriter: event files TensorBoard reads back, without paying for
torch's import in every run (tensorboardX imports torch when it is installed)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO

from analysis.runs import scalar_curve

WRITE_AND_READ_BACK = r"""
import importlib.util
import sys
from training.metrics import MetricWriter

installed = importlib.util.find_spec("torch") is not None

writer = MetricWriter(sys.argv[1], enabled=True)
writer.write_config({"model": {"num_heads": 4}, "seed": 0})
writer.scalars(3, {"eval_loss": 2.5})
writer.close()
print("torch imported:", "torch" in sys.modules)
try:
    import torch  # noqa: F401  (still importable afterwards, where installed)
    importable = True
except ImportError:
    importable = False
print("torch importable as installed:", importable == installed)
"""


@pytest.mark.slow  # starts a process: the pytest process may have imported torch already
def test_the_writer_leaves_torch_unimported_and_writes_what_tensorboard_reads(tmp_path):
    logdir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", WRITE_AND_READ_BACK, str(logdir)],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "torch imported: False" in done.stdout
    assert "torch importable as installed: True" in done.stdout
    assert scalar_curve(str(logdir), "eval_loss") == {3: 2.5}
