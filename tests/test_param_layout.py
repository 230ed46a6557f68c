"""Parameter names, shapes and logical axes of BERT-base and each attention variant,
pinned in tests/testdata/model_param_shapes.json (as flaxformer pins its models): a
refactor that renames, reshapes or re-shards a parameter changes checkpoints and
fails here. After an intended change, regenerate the file with

  UPDATE_PARAM_SHAPES=1 python -m pytest tests/test_param_layout.py
"""

from __future__ import annotations

import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from configs import model as model_configs
from models import BertForMaskedLM, ModelConfig

PINNED = os.path.join(os.path.dirname(__file__), "testdata", "model_param_shapes.json")

VARIANTS = {  # name -> configs/model.py ARGS (all at BERT-base size)
    "multi_head": "size=base",
    "large_key_size": "size=base,key_size=128",
    "fixed_head_size": "size=base,head_size=128",
    "talking_heads": "size=base,attention=talking_heads",
    "talking_heads_hk_hv": "size=base,attention=talking_heads,th_logit_heads=16,"
                           "th_value_heads=8",
    "talking_heads_dynamic_grouped": "size=base,attention=talking_heads,th_groups=4,"
                                     "th_dynamic=x2l+m2l+x2w+m2w",
    "general_bilinear": "size=base,attention=general_bilinear",
}


def layout(arg: str) -> dict[str, dict[str, list]]:
    """{'bert/encoder/layer_0/attention/query/kernel': {'shape': [...], 'axes': [...]}}."""
    cfg = ModelConfig.from_config(model_configs.get_config(arg).model)
    ids = jnp.zeros((1, 8), jnp.int32)
    boxed = jax.eval_shape(lambda: BertForMaskedLM(cfg).init(
        jax.random.key(0), ids, ids, ids, jnp.zeros((1, 2), jnp.int32)))["params"]
    shapes = nn.unbox(boxed)
    axes = nn.get_partition_spec(boxed)
    flat_shapes = jax.tree_util.tree_leaves_with_path(shapes)
    flat_axes = jax.tree.leaves(axes, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
    out = {}
    for (path, shape), spec in zip(flat_shapes, flat_axes, strict=True):
        name = "/".join(p.key for p in path)
        out[name] = {"shape": list(shape.shape), "axes": list(spec)}
    return out


def current() -> dict[str, dict]:
    return {name: layout(arg) for name, arg in VARIANTS.items()}


def test_parameter_layout_matches_the_pinned_file():
    got = current()
    if os.environ.get("UPDATE_PARAM_SHAPES"):
        with open(PINNED, "w") as f:
            json.dump(got, f, indent=1, sort_keys=True)
            f.write("\n")
        pytest.skip(f"rewrote {PINNED}")
    with open(PINNED) as f:
        pinned = json.load(f)
    assert sorted(got) == sorted(pinned)
    for variant in pinned:
        missing = sorted(set(pinned[variant]) - set(got[variant]))
        added = sorted(set(got[variant]) - set(pinned[variant]))
        assert not missing and not added, f"{variant}: missing {missing}, added {added}"
        for name, expected in pinned[variant].items():
            assert got[variant][name] == expected, f"{variant}: {name}"
