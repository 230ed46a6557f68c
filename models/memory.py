"""Analytic memory of one chip's training step: state, gradients and saved activations.

What autodiff must keep from the forward pass for the backward one, per encoder layer,
for t = b x n tokens on the chip (b sequences of n tokens), width D, feed-forward F, key
and value heads N K and G V, a bytes per activation element (2 in bf16, 4 in fp32) and
1 byte per dropout mask element (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", section 4.1):

  attention   a t D (projection input) + 2 a t N K (queries, keys) + a t G V (values)
              (the variant's projected widths: general bilinear attention keeps H D
              queries and no keys or values) + b n^2 x the variant's saved_score_bytes
              (softmax output, dropout mask and dropped weights: 5 H at a = 2) + a t G V
              (output projection input) + t D (hidden dropout mask) + the variant's
              saved_bytes_per_token (talking heads' dynamic mixing matrices)
  layer norms 2 a t D
  feed-forward a t D (input) + 2 a t F (GELU input and output) + t D (dropout mask)

At BERT's shapes (N K = G V = D, F = 4 D, a = 2) this is their t D (34 + 5 H n / D).
The embeddings keep a t D + t D; the MLM head a (4 p D) for its p predicted tokens and
the fp32 logits with their gradient, 8 p V. With sparse_final_layer the last layer runs
everything but its key and value projections (and the variant's key-side work: talking
heads' m2l/m2w matrices) on the p predicted tokens only.

The state is exact (the shard shapes of the state's arrays, training/fit_check.py); the
gradients are one fp32 copy of this chip's parameter shard. Scanned layers
(model.scan_layers) add one more fp32 copy of the layers' weights: the slice of the
stack the scan runs over, or its stacked gradient before it joins the last layer's
(XLA's plan for BERT-base on CPU grows by 312 MiB, the layers' 324 MiB). That is all
this model adds for them, and it is not all they cost: XLA's TPU v4 plan for BERT-base
at 32 sequences per chip grows from 4.98 to 9.12 GiB when the layers are scanned (the
scan's saved activations are planned less tightly than unrolled layers'), where this
model adds 0.3 GiB; scripts/fit_check.py judges on XLA's plan. XLA's plan differs from
this sum where it fuses, recomputes or overlaps buffers (docs/SCALE.md compares the
two).
"""

from __future__ import annotations

import dataclasses

from attention import registry
from models.config import ModelConfig

MASK_BYTES = 1


@dataclasses.dataclass(frozen=True)
class ActivationBytes:
    layers: float  # every encoder layer
    embeddings: float
    mlm_head: float

    @property
    def total(self) -> float:
        return self.layers + self.embeddings + self.mlm_head


def element_bytes(cfg: ModelConfig) -> int:
    return 2 if cfg.dtype == "bfloat16" else 4


def layer_bytes(cfg: ModelConfig, queries: float, keys_per_query: int,
                key_value_tokens: float | None = None) -> float:
    """Saved bytes of one encoder layer: `queries` tokens attending over
    `keys_per_query` keys each; `key_value_tokens` (default `queries`) tokens run the
    key and value projections."""
    a, d, f = element_bytes(cfg), cfg.hidden_size, cfg.mlp_dim
    variant = registry.get(cfg.attention)
    q, k, v = variant.projected_widths(cfg)
    gv = cfg.num_value_heads * cfg.head_value_size
    kv_tokens = queries if key_value_tokens is None else key_value_tokens
    hidden_mask = MASK_BYTES * d if cfg.dropout_rate > 0 else 0
    per_query, per_key = variant.saved_bytes_per_token(cfg, a)
    attention = (a * d * kv_tokens + a * q * queries + a * k * kv_tokens + a * v * kv_tokens
                 + queries * keys_per_query * variant.saved_score_bytes(cfg, a)
                 + a * gv * queries + hidden_mask * queries
                 + per_query * queries + per_key * kv_tokens)
    layer_norms = 2 * a * d * queries
    feed_forward = (a * d + 2 * a * f + hidden_mask) * queries
    return attention + layer_norms + feed_forward


def activation_bytes(cfg: ModelConfig, sequences: float, seq_len: int,
                     predictions_per_seq: int) -> ActivationBytes:
    """Saved activations of `sequences` sequences (one chip's rows) of a training step."""
    a, d = element_bytes(cfg), cfg.hidden_size
    tokens, predicted = sequences * seq_len, sequences * predictions_per_seq
    dense_layers = cfg.num_layers - (1 if cfg.sparse_final_layer else 0)
    layers = dense_layers * layer_bytes(cfg, tokens, seq_len)
    if cfg.sparse_final_layer:
        layers += layer_bytes(cfg, predicted, seq_len, key_value_tokens=tokens)
    hidden_mask = MASK_BYTES if cfg.dropout_rate > 0 else 0
    embeddings = (a + hidden_mask) * d * tokens
    mlm_head = 4 * a * d * predicted + 8 * predicted * cfg.vocab_size
    return ActivationBytes(layers, embeddings, mlm_head)


@dataclasses.dataclass(frozen=True)
class StepBytes:
    """One chip's analytic peak of a training step, by part."""

    state: float  # fp32 parameters and AdamW's two moments, this chip's shard
    gradients: float  # one fp32 gradient of the shard
    activations: ActivationBytes
    layer_stack: float = 0.0  # scanned layers: one more fp32 copy of the layers' shard

    @property
    def total(self) -> float:
        return self.state + self.gradients + self.activations.total + self.layer_stack


def step_bytes(cfg: ModelConfig, sequences_per_chip: float, seq_len: int,
               predictions_per_seq: int, parameter_shards: int) -> StepBytes:
    """`parameter_shards`: how many ways the parameters are split (fsdp x tensor); the
    batch itself (a few bytes per token) is left out."""
    from models.flops import layer_parameter_count, parameter_counts

    parameters = sum(parameter_counts(cfg)) / parameter_shards
    stack = 4 * layer_parameter_count(cfg) / parameter_shards if cfg.scan_layers else 0.0
    return StepBytes(state=12 * parameters, gradients=4 * parameters,
                     activations=activation_bytes(cfg, sequences_per_chip, seq_len,
                                                  predictions_per_seq), layer_stack=stack)
