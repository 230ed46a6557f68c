"""Parameter initialisers shared by the attention variants and the rest of BERT
(models/layers.py, models/bert.py), each tagged with its logical sharding axes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import flax.linen as nn

if TYPE_CHECKING:
    from models.config import ModelConfig


def kernel_init(config: ModelConfig, axes: tuple[str | None, ...]) -> nn.initializers.Initializer:
    """BERT's truncated-normal init (stddev config.initializer_range)."""
    return nn.with_logical_partitioning(
        nn.initializers.truncated_normal(config.initializer_range), axes
    )


def zeros_init(axes: tuple[str | None, ...]) -> nn.initializers.Initializer:
    return nn.with_logical_partitioning(nn.initializers.zeros_init(), axes)
