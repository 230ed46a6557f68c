"""The attention variants' own settings (model.<variant>.*): fields of ModelConfig made
from the registry, and checkpoints saved before a setting existed."""

from __future__ import annotations

import pytest
from helpers import tiny_model_config

from training.pretrain import TrainingError, check_same_architecture


def test_a_checkpoint_saved_before_a_setting_existed_resumes_with_its_default():
    """A run saved before talking_heads.groups existed has no such key: it meant the
    default (full mixing), so it resumes; a config asking for another value is refused."""
    current = tiny_model_config(attention="talking_heads")
    saved = {"model": current.to_dict()}
    del saved["model"]["talking_heads"]["groups"]
    check_same_architecture(saved, current, "runs/x")
    grouped = tiny_model_config(attention="talking_heads", talking_heads={"groups": 2})
    with pytest.raises(TrainingError, match=r"model.talking_heads.groups: checkpoint 1, "
                                            r"config 2"):
        check_same_architecture(saved, grouped, "runs/x")
