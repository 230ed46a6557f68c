"""scripts/mixing_matrices.py on checkpoints of a tiny talking-heads BERT whose mixing
matrices are set to known ones: the identity (every share 1), a permutation (own head
0, largest head 1), and a random matrix scored by a plain loop over its columns. The
fan-in reference is checked against symmetry: each of n heads is an equal draw, so
the own head's expected share is exactly 1/n."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest
from helpers import init_params, random_batch, run_script, tiny_model_config

from models import BertForMaskedLM
from training.checkpoints import Checkpointer

pytestmark = pytest.mark.slow  # each test starts scripts/mixing_matrices.py


def save_run(workdir: str, params) -> None:
    checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"))
    checkpointer.save(7, {"params": params}, config={"model": {}})
    checkpointer.close()


def shares_by_loop(p: np.ndarray) -> tuple[float, float]:
    own, top = [], []
    for column in range(p.shape[1]):
        weights = [float(p[row, column]) ** 2 for row in range(p.shape[0])]
        own.append(weights[column] / sum(weights))
        top.append(max(weights) / sum(weights))
    return sum(own) / len(own), sum(top) / len(top)


def test_shares_of_known_mixings_and_the_fan_in_reference(tmp_path):
    config = tiny_model_config(attention="talking_heads")  # 4 heads, 2 layers
    params = init_params(BertForMaskedLM(config), *random_batch(jax.random.key(0)))
    heads = config.num_heads
    random = np.random.default_rng(3).standard_normal((heads, heads))
    permutation = np.eye(heads)[[1, 2, 3, 0]]
    layers = params["bert"]["encoder"]
    layers["layer_0"]["attention"]["logits_mixing"] = np.eye(heads)
    layers["layer_0"]["attention"]["weights_mixing"] = permutation
    layers["layer_1"]["attention"]["logits_mixing"] = random
    save_run(str(tmp_path / "run"), params)

    out = tmp_path / "mixing.json"
    result = run_script("mixing_matrices.py", [f"--workdir={tmp_path / 'run'}", f"--json={out}"])
    assert result.returncode == 0, result.stderr
    found = json.loads(out.read_text())[str(tmp_path / "run")]
    assert found["step"] == 7
    matrices = found["matrices"]
    assert sorted(matrices) == ["layer_0/logits_mixing", "layer_0/weights_mixing",
                                "layer_1/logits_mixing", "layer_1/weights_mixing"]
    assert matrices["layer_0/logits_mixing"]["own"] == pytest.approx(1.0)
    assert matrices["layer_0/logits_mixing"]["top"] == pytest.approx(1.0)
    assert matrices["layer_0/weights_mixing"]["own"] == pytest.approx(0.0)
    assert matrices["layer_0/weights_mixing"]["top"] == pytest.approx(1.0)
    own, top = shares_by_loop(random)
    assert matrices["layer_1/logits_mixing"]["own"] == pytest.approx(own, rel=1e-6)
    assert matrices["layer_1/logits_mixing"]["top"] == pytest.approx(top, rel=1e-6)
    reference = matrices["layer_1/weights_mixing"]["fan_in_init"]
    assert reference["own"] == pytest.approx(1 / heads, abs=0.005)
    assert 1 / heads < reference["top"] < 1.0
    assert "layer_0/logits_mixing 4x4: own head 1.00" in result.stdout


def test_a_run_without_mixing_matrices_is_one_error_line(tmp_path):
    config = tiny_model_config()  # multi-head
    save_run(str(tmp_path / "mh"), init_params(BertForMaskedLM(config),
                                               *random_batch(jax.random.key(0))))
    result = run_script("mixing_matrices.py", [f"--workdir={tmp_path / 'mh'}"])
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'mh'}: its checkpoint at step 7 has no talking-heads mixing "
        f"matrices (not a talking-heads run?)")
    result = run_script("mixing_matrices.py", [f"--workdir={tmp_path / 'absent'}"])
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'absent'}: no checkpoints/ (not a pretraining run?)")
