"""The attention variants' own settings (model.<variant>.*): fields of ModelConfig made
from the registry, and checkpoints saved before a setting existed."""

from __future__ import annotations

import pytest
from helpers import tiny_model_config

from training.pretrain_loop import TrainingError
from training.resume import check_same_architecture


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


def test_every_variant_with_settings_is_a_model_config_field_with_its_short_args():
    """ModelConfig's variant fields come from the registry (no line per variant in
    models/config.py), default to the settings class's defaults, and reach the
    configs' ARGS and the --config.model.<name>.FIELD overrides."""
    import dataclasses

    from attention import registry
    from configs import model as model_configs
    from models import ModelConfig

    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    variants = registry.with_settings()
    assert variants  # talking_heads at least
    defaults = model_configs.model_defaults()
    for name, variant in variants.items():
        assert name in fields
        assert getattr(ModelConfig(), name) == variant.settings()
        for arg, field in variant.short_args.items():
            assert model_configs.MODEL_ARGS[arg] == f"{name}.{field}"
            assert field in defaults[name]
