"""Analytic parameter and FLOP counts (the formula MFU is measured against).

FLOPs count multiply-adds as 2; only matrix products are counted (softmax,
LayerNorm, GELU and embedding lookups are a few percent at BERT sizes). Per
token, for sequence length n, with N query/key heads, H softmax heads, G value
heads, key size K, value size V, width D, feed-forward width F:

  projections   2 * D * (2 N K + G V) + 2 * G V * D
  attention     2 * n * (N K + G V)                     logits, weights x values
  variant       its extra_flops_per_token (talking heads: 2 n (N H + H G), P_l and P_w)
  feed-forward  2 * 2 * D * F
  MLM head      2 * D * D + 2 * D * vocab               per *predicted* token

Training costs 3x the forward pass (backward = 2x forward). With
sparse_final_layer the last layer runs its key/value projections and the variant's
key-side work (talking heads' m2l/m2w maps) on every token and everything else (query
and output projections, attention, mixing, feed-forward) only on the predicted tokens.
"""

from __future__ import annotations

import dataclasses

from attention import registry
from models.config import ModelConfig


def parameter_counts(cfg: ModelConfig) -> tuple[int, int]:
    """(parameters without the MLM head, MLM head parameters) of BertForMaskedLM.

    From the real model's shapes (jax.eval_shape: nothing is allocated), so the
    count cannot drift from the code. Without the MLM head it is what the papers
    report (BERT-base: 109,482,240, pooler included).
    """
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from models.bert import BertForMaskedLM

    ids = jnp.zeros((1, 2), jnp.int32)
    shapes = jax.eval_shape(lambda: BertForMaskedLM(cfg).init(jax.random.key(0), ids))
    params = nn.unbox(shapes)["params"]
    head = sum(x.size for x in jax.tree.leaves(params["mlm_head"]))
    return sum(x.size for x in jax.tree.leaves(params)) - head, head


def layer_parameter_count(cfg: ModelConfig) -> int:
    """Parameters of the encoder's layers (all of them; embeddings, pooler, final norm
    and heads excluded), from the model's shapes as parameter_counts."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from models.layers import Encoder

    x = jnp.zeros((1, 2, cfg.hidden_size), jnp.float32)
    mask = jnp.ones((1, 2), bool)
    shapes = jax.eval_shape(lambda: Encoder(cfg).init(jax.random.key(0), x, mask, True))
    encoder = nn.unbox(shapes)["params"]
    return sum(x.size for name, tree in encoder.items() if name != "final_norm"
               for x in jax.tree.leaves(tree))


@dataclasses.dataclass(frozen=True)
class FlopCount:
    encoder_per_token: float  # forward FLOPs of all layers, per input token
    mlm_head_per_prediction: float  # forward FLOPs of the MLM head, per predicted token
    # Sparse final layer: its per-token FLOPs that run only on predicted tokens
    # (everything but the key/value projections); 0 when the layer is dense.
    skipped_per_unpredicted_token: float = 0.0

    def train_step(self, tokens: int, predictions: int) -> float:
        """Forward + backward FLOPs for a step over `tokens` with `predictions` MLM targets."""
        encoder = self.encoder_per_token * tokens
        encoder -= self.skipped_per_unpredicted_token * (tokens - predictions)
        return 3.0 * (encoder + self.mlm_head_per_prediction * predictions)


def key_value_flops_per_token(cfg: ModelConfig) -> float:
    """What a layer computes at every key position: the key and value projections and
    the variant's key-side work."""
    variant = registry.get(cfg.attention)
    _, keys, values = variant.projected_widths(cfg)
    return 2 * cfg.hidden_size * (keys + values) + variant.extra_key_flops_per_token(cfg)


def layer_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    d, k, v = cfg.hidden_size, cfg.head_key_size, cfg.head_value_size
    n_qk, g = cfg.num_logit_heads, cfg.num_value_heads
    variant = registry.get(cfg.attention)
    queries, keys, values = variant.projected_widths(cfg)
    projections = 2 * d * (queries + keys + values) + 2 * g * v * d
    attention = 2 * seq_len * (n_qk * k + g * v)
    extra = (variant.extra_flops_per_token(cfg, seq_len)
             + variant.extra_key_flops_per_token(cfg))
    feed_forward = 4 * d * cfg.mlp_dim
    return projections + attention + extra + feed_forward


def flop_count(cfg: ModelConfig, seq_len: int) -> FlopCount:
    d = cfg.hidden_size
    layer = layer_flops_per_token(cfg, seq_len)
    skipped = layer - key_value_flops_per_token(cfg) if cfg.sparse_final_layer else 0.0
    return FlopCount(
        encoder_per_token=cfg.num_layers * layer,
        mlm_head_per_prediction=2 * d * d + 2 * d * cfg.vocab_size,
        skipped_per_unpredicted_token=skipped,
    )
