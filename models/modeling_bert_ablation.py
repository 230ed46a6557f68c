"""PyTorch BERT with this project's attention variants, for transformers' remote code.

scripts/export_hf.py copies this file unchanged beside config.json and model.safetensors
when a row is one plain BERT cannot express (key or value size other than hidden/heads,
talking heads, pre-LN). `AutoModelForMaskedLM.from_pretrained(DIR, trust_remote_code=True)`
(or AutoModel, AutoModelForSequenceClassification) then builds these classes. The file
travels alone, so it imports only torch and transformers; nothing in the project imports
it. It computes what the JAX model computes (models/bert.py, models/layers.py, attention/),
step for step; tests/test_hf_export.py checks the logits agree to 1e-4 for every variant.

Parameter names are BERT's (bert.embeddings..., attention.self.query, cls.predictions...)
plus what the variants add: attention.self.logits_mixing [N, H] and weights_mixing [H, G]
(talking heads), their dynamic maps attention.self.{logits,weights}_mixing_from_{queries,
keys} [D, N, H] and [D, H, G] (dynamic projections x2l, m2l, x2w, m2w) and
bert.encoder.final_norm (pre-LN).

Einsum letters: B batch, T query length, S key length, N query/key heads (h_k),
H softmax heads, G value heads (h_v), K key size, V value size, D width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    SequenceClassifierOutput,
)

# Added to the logits of padded keys, as the JAX model (attention/base.py) does.
MASK_VALUE = -1e9


class BertAblationConfig(PretrainedConfig):
    """BertConfig's fields plus the attention variant's (models/config.py's names)."""

    model_type = "bert_ablation"

    def __init__(self, vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, hidden_act="gelu",
                 hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                 max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02,
                 layer_norm_eps=1e-12, pad_token_id=0, attention="multi_head",
                 key_size=None, value_size=None, norm_placement="post", talking_heads=None,
                 **kwargs):
        super().__init__(pad_token_id=pad_token_id, **kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.attention = attention  # multi_head | talking_heads
        self.key_size = key_size  # per-head query/key width; None: hidden/logit heads
        self.value_size = value_size  # per-head value width; None: hidden/value heads
        self.norm_placement = norm_placement  # post (BERT) | pre (LayerNorm before sublayers)
        # num_logit_heads, num_value_heads, projections (both|logits|weights),
        # mask_placement (after|before), dropout_placement (after_mixing|before_mixing),
        # dynamic_projections ("+"-joined x2l, m2l, x2w,
        # m2w): the JAX model's model.talking_heads.* fields.
        self.talking_heads = dict(talking_heads or {})

    # -- the head counts and sizes, derived as models/config.py derives them ----------
    @property
    def head_key_size(self) -> int:
        return self.key_size or self.hidden_size // self.logit_heads

    @property
    def head_value_size(self) -> int:
        return self.value_size or self.hidden_size // self.value_heads

    def _mixes(self, which: str) -> bool:
        return (self.attention == "talking_heads"
                and self.talking_heads.get("projections", "both") in ("both", which))

    @property
    def mix_logits(self) -> bool:
        return self._mixes("logits")

    @property
    def mix_weights(self) -> bool:
        return self._mixes("weights")

    @property
    def dynamic(self) -> tuple[str, ...]:
        names = self.talking_heads.get("dynamic_projections") or ""
        return tuple(names.split("+")) if self.attention == "talking_heads" and names else ()

    @property
    def logit_heads(self) -> int:
        n = self.talking_heads.get("num_logit_heads") if self.mix_logits else None
        return n or self.num_attention_heads

    @property
    def value_heads(self) -> int:
        n = self.talking_heads.get("num_value_heads") if self.mix_weights else None
        return n or self.num_attention_heads


class Embeddings(nn.Module):
    def __init__(self, config: BertAblationConfig):
        super().__init__()
        d = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, d, padding_idx=None)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, d)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, d)
        self.LayerNorm = nn.LayerNorm(d, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    """Projections to heads, then multi-head or talking-heads attention (heads not merged)."""

    def __init__(self, config: BertAblationConfig):
        super().__init__()
        d, n, g = config.hidden_size, config.logit_heads, config.value_heads
        self.key_size, self.value_size = config.head_key_size, config.head_value_size
        self.query = nn.Linear(d, n * self.key_size)
        self.key = nn.Linear(d, n * self.key_size)
        self.value = nn.Linear(d, g * self.value_size)
        h = config.num_attention_heads
        self.logits_mixing = nn.Parameter(torch.eye(n, h)) if config.mix_logits else None
        self.weights_mixing = nn.Parameter(torch.eye(h, g)) if config.mix_weights else None
        # Dynamic projections: per-position terms of P_l and P_w from the hidden states
        # at the query (x2*) and key (m2*) positions; the weights come from the export.
        for name, side, at, shape in (("x2l", "logits", "queries", (d, n, h)),
                                      ("m2l", "logits", "keys", (d, n, h)),
                                      ("x2w", "weights", "queries", (d, h, g)),
                                      ("m2w", "weights", "keys", (d, h, g))):
            dynamic = nn.Parameter(torch.zeros(shape)) if name in config.dynamic else None
            setattr(self, f"{side}_mixing_from_{at}", dynamic)
        self.mask_before = config.talking_heads.get("mask_placement", "after") == "before"
        self.dropout_before_mixing = (config.attention == "talking_heads" and config.talking_heads
                                      .get("dropout_placement") == "before_mixing")
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def forward(self, x, mask):
        """x (B, T, D), mask (B, S) bool -> (B, T, G, V)."""
        b, t, _ = x.shape

        def heads(layer, size):
            return layer(x).view(b, t, -1, size)

        query = heads(self.query, self.key_size) * self.key_size ** -0.5
        key, value = heads(self.key, self.key_size), heads(self.value, self.value_size)
        logits = torch.einsum("BTNK,BSNK->BNTS", query, key)
        bias = torch.where(mask, 0.0, MASK_VALUE).to(logits.dtype)[:, None, None, :]
        if self.mask_before:
            logits = logits + bias
        if self.logits_mixing is not None:
            logits = self.mix(x, logits, "logits")
        if self.mask_before:
            # A head mixture can cancel the bias: padded keys are masked again.
            logits = torch.where(mask[:, None, None, :], logits, bias)
        else:
            logits = logits + bias
        weights = logits.softmax(dim=-1)
        if self.dropout_before_mixing:  # the JAX model's dropout_placement=before_mixing
            weights = self.dropout(weights)
        if self.weights_mixing is not None:
            weights = self.mix(x, weights, "weights")
        if not self.dropout_before_mixing:
            weights = self.dropout(weights)
        return torch.einsum("BGTS,BSGV->BTGV", weights, value)

    def mix(self, x, scores, side: str):
        """(B, from heads, T, S) -> (B, to heads, T, S): the static matrix plus the
        dynamic terms, each its own product (the JAX model folds the static matrix into
        the first; the sum is the same)."""
        out = torch.einsum("BNTS,NH->BHTS", scores, getattr(self, f"{side}_mixing"))
        from_queries = getattr(self, f"{side}_mixing_from_queries")
        if from_queries is not None:
            per_query = torch.einsum("BTD,DNH->BTNH", x, from_queries)
            out = out + torch.einsum("BNTS,BTNH->BHTS", scores, per_query)
        from_keys = getattr(self, f"{side}_mixing_from_keys")
        if from_keys is not None:
            per_key = torch.einsum("BSD,DNH->BSNH", x, from_keys)
            out = out + torch.einsum("BNTS,BSNH->BHTS", scores, per_key)
        return out


class AttentionOutput(nn.Module):
    def __init__(self, config: BertAblationConfig):
        super().__init__()
        self.dense = nn.Linear(config.value_heads * config.head_value_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)


class Attention(nn.Module):
    def __init__(self, config: BertAblationConfig):
        super().__init__()
        self.self = SelfAttention(config)
        self.output = AttentionOutput(config)

    def forward(self, x, mask):
        """The attention branch before its residual: (B, T, D) -> (B, T, D)."""
        mixed = self.self(x, mask)
        return self.output.dropout(self.output.dense(mixed.flatten(2)))


class Dense(nn.Module):
    def __init__(self, features_in: int, features_out: int):
        super().__init__()
        self.dense = nn.Linear(features_in, features_out)


class FeedForwardOutput(Dense):
    def __init__(self, config: BertAblationConfig):
        super().__init__(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)


class Layer(nn.Module):
    def __init__(self, config: BertAblationConfig):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.attention = Attention(config)
        self.intermediate = Dense(config.hidden_size, config.intermediate_size)
        self.output = FeedForwardOutput(config)

    def feed_forward(self, x):
        h = F.gelu(self.intermediate.dense(x))  # exact (erf) GELU, as BERT
        return self.output.dropout(self.output.dense(h))

    def forward(self, x, mask):
        attention_norm, mlp_norm = self.attention.output.LayerNorm, self.output.LayerNorm
        if self.pre_norm:
            x = x + self.attention(attention_norm(x), mask)
            return x + self.feed_forward(mlp_norm(x))
        x = attention_norm(x + self.attention(x, mask))
        return mlp_norm(x + self.feed_forward(x))


class Encoder(nn.Module):
    def __init__(self, config: BertAblationConfig):
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.final_norm = (nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
                           if config.norm_placement == "pre" else None)

    def forward(self, x, mask):
        states = [x]
        for layer in self.layer:
            states.append(layer(states[-1], mask))
        if self.final_norm is not None:
            states[-1] = self.final_norm(states[-1])
        return states


class Pooler(Dense):
    def __init__(self, config: BertAblationConfig):
        super().__init__(config.hidden_size, config.hidden_size)

    def forward(self, hidden):
        return torch.tanh(self.dense(hidden[:, 0]))


class BertAblationPreTrainedModel(PreTrainedModel):
    config_class = BertAblationConfig
    base_model_prefix = "bert"

    def get_input_embeddings(self):  # the heads' (BertAblationModel has its own)
        return self.bert.get_input_embeddings()

    def _init_weights(self, module):
        """BERT's init: normal(0, initializer_range) weights, zero biases, unit LayerNorms;
        the mixing matrices keep their identity start."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, MLMPredictions):
            nn.init.zeros_(module.bias)


class BertAblationModel(BertAblationPreTrainedModel):
    """Embeddings, encoder and pooler: (last hidden state, pooled [CLS])."""

    def __init__(self, config: BertAblationConfig):
        super().__init__(config)
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(self, input_ids, attention_mask=None, token_type_ids=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        states = self.encoder(self.embeddings(input_ids, token_type_ids),
                              attention_mask.bool())
        return BaseModelOutputWithPooling(
            last_hidden_state=states[-1], pooler_output=self.pooler(states[-1]),
            hidden_states=tuple(states) if output_hidden_states else None)


class MLMTransform(nn.Module):
    def __init__(self, config: BertAblationConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class MLMPredictions(nn.Module):
    """Transform, then scores against the word embeddings (tied: read, not copied)."""

    def __init__(self, config: BertAblationConfig):
        super().__init__()
        self.transform = MLMTransform(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden, word_embeddings):
        h = self.transform.LayerNorm(F.gelu(self.transform.dense(hidden)))
        return h @ word_embeddings.T + self.bias


class MLMHead(nn.Module):
    def __init__(self, config: BertAblationConfig):
        super().__init__()
        self.predictions = MLMPredictions(config)


class BertAblationForMaskedLM(BertAblationPreTrainedModel):
    def __init__(self, config: BertAblationConfig):
        super().__init__(config)
        self.bert = BertAblationModel(config)
        self.cls = MLMHead(config)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states)
        logits = self.cls.predictions(out.last_hidden_state,
                                      self.bert.embeddings.word_embeddings.weight)
        loss = None
        if labels is not None:  # -100: not a target, as transformers' MLM collator
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1),
                                   ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)


class BertAblationForSequenceClassification(BertAblationPreTrainedModel):
    """Pooled [CLS], dropout, dense; num_labels=1 is regression (STS-B)."""

    def __init__(self, config: BertAblationConfig):
        super().__init__(config)
        self.bert = BertAblationModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states)
        logits = self.classifier(self.dropout(out.pooler_output))
        loss = None
        if labels is not None:
            loss = (F.mse_loss(logits.squeeze(-1), labels.float()) if self.config.num_labels == 1
                    else F.cross_entropy(logits, labels))
        return SequenceClassifierOutput(loss=loss, logits=logits,
                                        hidden_states=out.hidden_states)
