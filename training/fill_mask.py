"""Fill-mask with a run's own model: the top-k tokens and probabilities at every [MASK]
of a text (scripts/fill_mask.py). The same numbers as transformers'
`pipeline("fill-mask")` on the run's export (tests/test_hf_export.py)."""

from __future__ import annotations

import jax
import numpy as np
from tokenizers import Tokenizer

from input_pipeline.tokenizer import MASK
from models import BertForMaskedLM
from training.export import RunModel


def fill_mask(model: RunModel, text: str, top_k: int = 5) -> list[list[tuple[int, str, float]]]:
    """For each [MASK] of `text`, left to right: the top_k (id, token, probability)."""
    # [MASK] typed by the user is the mask token, also in a tokenizer loaded from a
    # vocab.txt (where it is not a special token yet): a copy with it made special.
    tokenizer = Tokenizer.from_str(model.tokenizer.to_str())
    tokenizer.add_special_tokens([MASK])
    encoding = tokenizer.encode(text)
    mask_id = tokenizer.token_to_id(MASK)
    positions = [i for i, token in enumerate(encoding.ids) if token == mask_id]
    if not positions:
        raise ValueError(f"no {MASK} in {text!r}")
    limit = model.model_config.max_position_embeddings
    if len(encoding.ids) > limit:
        raise ValueError(f"{len(encoding.ids)} tokens, more than the model's {limit} positions")
    ids = np.asarray([encoding.ids], np.int32)
    types = np.asarray([encoding.type_ids], np.int32)
    out = BertForMaskedLM(model.model_config).apply(
        {"params": model.params}, ids, types, np.ones_like(ids),
        masked_positions=np.asarray([positions], np.int32))
    probabilities = np.asarray(jax.nn.softmax(out["mlm_logits"][0], axis=-1))  # (P, vocab)
    answers = []
    for row in probabilities:
        best = np.argsort(-row, kind="stable")[:top_k]
        answers.append([(int(i), tokenizer.id_to_token(int(i)), float(row[i])) for i in best])
    return answers
