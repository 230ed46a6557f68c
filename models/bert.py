"""BERT: the encoder, the MLM head (tied, sparse) and the classification head.

Einsum and shape letters: the one legend in attention/__init__.py.

Parameter tree (pinned by tests/test_param_layout.py):
  bert/embeddings/{word,position,token_type}/embedding, bert/embeddings/norm
  bert/encoder/layer_i/attention/{query,key,value,out}, [logits_mixing, weights_mixing]
  bert/encoder/layer_i/{attention_norm,mlp/intermediate,mlp/output,mlp_norm}
  bert/encoder/final_norm (pre-LN only), bert/pooler
  mlm_head/{transform,norm,output_bias}        (BertForMaskedLM)
  classifier                                   (BertForSequenceClassification)
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from models.config import ModelConfig
from models.layers import Embeddings, Encoder, dense, gather_positions, layer_norm

Array = jax.Array


class BertModel(nn.Module):
    """Embeddings + encoder + pooler. Returns (hidden states (B, T, D), pooled (B, D)).

    With `final_positions` (B, P) the last layer runs only there (Encoder) and the
    hidden states are (B, P, D); pooled then pools the first of those rows, which
    is [CLS] when final_positions[:, 0] is 0.
    """

    config: ModelConfig

    def setup(self) -> None:
        self.embeddings = Embeddings(self.config)
        self.encoder = Encoder(self.config)
        # D x D: the output axis is tagged 'mlp' so the two axes shard differently.
        self.pooler = dense(self.config, self.config.hidden_size, ("embed", "mlp"), "pooler")

    def __call__(
        self,
        input_ids: Array,
        token_type_ids: Array | None = None,
        attention_mask: Array | None = None,
        deterministic: bool = True,
        final_positions: Array | None = None,
    ) -> tuple[Array, Array]:
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = jnp.ones_like(input_ids)
        mask = attention_mask.astype(bool)
        x = self.embeddings(input_ids, token_type_ids, deterministic)
        hidden = self.encoder(x, mask, deterministic, final_positions)
        pooled = jnp.tanh(self.pooler(hidden[:, 0]))
        return hidden, pooled


class MLMHead(nn.Module):
    """Transform (dense, GELU, LayerNorm), then scores against the tied word embeddings."""

    config: ModelConfig

    @nn.compact
    def __call__(self, hidden: Array, embeddings: Embeddings) -> Array:
        cfg = self.config
        h = dense(cfg, cfg.hidden_size, ("embed", "mlp"), "transform")(hidden)
        h = layer_norm(cfg, "norm")(nn.gelu(h, approximate=False))
        logits = embeddings.attend(h)  # (.., vocab)
        bias = self.param(
            "output_bias",
            nn.with_logical_partitioning(nn.initializers.zeros_init(), ("vocab",)),
            (cfg.vocab_size,),
        )
        return logits.astype(jnp.float32) + bias


class BertForMaskedLM(nn.Module):
    """BERT with the MLM head. With `masked_positions` (B, P) only those P
    positions are scored, which skips the (B, T, vocab) logits entirely; with
    config.sparse_final_layer the last encoder layer also runs on those P
    positions only, and hidden_states is then (B, P, D)."""

    config: ModelConfig

    def setup(self) -> None:
        self.bert = BertModel(self.config)
        self.mlm_head = MLMHead(self.config)

    def __call__(
        self,
        input_ids: Array,
        token_type_ids: Array | None = None,
        attention_mask: Array | None = None,
        masked_positions: Array | None = None,
        deterministic: bool = True,
    ) -> dict[str, Array]:
        sparse = self.config.sparse_final_layer and masked_positions is not None
        hidden, pooled = self.bert(input_ids, token_type_ids, attention_mask, deterministic,
                                   final_positions=masked_positions if sparse else None)
        selected = hidden
        if masked_positions is not None and not sparse:
            selected = gather_positions(hidden, masked_positions)
        logits = self.mlm_head(selected, self.bert.embeddings)
        return {"hidden_states": hidden, "pooled": pooled, "mlm_logits": logits}


class BertForSequenceClassification(nn.Module):
    """BERT + dropout + dense on the pooled [CLS]; num_labels=1 is regression (STS-B)."""

    config: ModelConfig
    num_labels: int

    @nn.compact
    def __call__(
        self,
        input_ids: Array,
        token_type_ids: Array | None = None,
        attention_mask: Array | None = None,
        deterministic: bool = True,
    ) -> Array:
        # The classifier reads only [CLS], so a sparse final layer computes that row alone.
        cls_only = jnp.zeros((input_ids.shape[0], 1), jnp.int32)
        _, pooled = BertModel(self.config, name="bert")(
            input_ids, token_type_ids, attention_mask, deterministic,
            final_positions=cls_only if self.config.sparse_final_layer else None,
        )
        pooled = nn.Dropout(self.config.dropout_rate)(pooled, deterministic=deterministic)
        logits = dense(self.config, self.num_labels, ("embed", None), "classifier")(pooled)
        return logits.astype(jnp.float32)


class BertForQuestionAnswering(nn.Module):
    """BERT + a dense layer of width 2 on every token: (B, T, 2) start and end logits of
    the answer span (BERT's run_squad.py and Hugging Face's `qa_outputs`)."""

    config: ModelConfig

    @nn.compact
    def __call__(
        self,
        input_ids: Array,
        token_type_ids: Array | None = None,
        attention_mask: Array | None = None,
        deterministic: bool = True,
    ) -> Array:
        hidden, _ = BertModel(self.config, name="bert")(
            input_ids, token_type_ids, attention_mask, deterministic)
        logits = dense(self.config, 2, ("embed", None), "qa_outputs")(hidden)
        return logits.astype(jnp.float32)
