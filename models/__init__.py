"""BERT built from the attention registry; see models/bert.py for the parameter tree."""

from models import layout
from models.bert import (
    BertForMaskedLM,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertModel,
)
from models.config import ModelConfig

__all__ = [
    "BertForMaskedLM",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertModel",
    "ModelConfig",
    "layout",
]
