"""Examples -> fixed-length numpy arrays for the classifier.

The tokenizer is a `tokenizers.Tokenizer` with a BERT post-processor
(`[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]` with type ids 0/1). Truncation is
done here rather than by the tokenizer because the tokenizers library's
"longest_first" splits the budget differently from BERT when the second
segment is the longer one and the budget is odd; BERT's `_truncate_seq_pair`
(run_classifier.py) removes one token at a time from the end of the currently
longer segment, the second one on ties, and that is what is reproduced.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tokenizers

from glue.tasks import Example, GlueTask, get_task

# Label value for examples without one (test): -1 for class ids, NaN for STS-B.
MISSING_CLASS = -1


def truncate_pair(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Lengths BERT keeps of two segments so that together they fit in `budget`."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def encode_examples(
    tokenizer: tokenizers.Tokenizer,
    examples: Sequence[Example],
    max_length: int,
    task: str | GlueTask,
    *,
    pad_id: int = 0,
) -> dict[str, np.ndarray]:
    """Tokenizes, truncates (BERT's longest-first) and pads to `max_length`.

    Returns int32 arrays `input_ids`, `token_type_ids`, `attention_mask` of
    shape [N, max_length] (padding: id `pad_id`, type 0, mask 0) and `labels`
    [N]: int32 class ids (-1 where missing) or float32 scores for STS-B (NaN
    where missing). The caller's tokenizer is not modified.
    """
    task = get_task(task)
    # A private copy without truncation/padding: we need the raw segment lengths.
    tok = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    tok.no_truncation()
    tok.no_padding()
    pair = task.is_pair
    num_special = tok.num_special_tokens_to_add(pair)
    if num_special == 0:
        raise ValueError(
            "the tokenizer adds no special tokens; BERT needs a [CLS]/[SEP] "
            "post-processor (e.g. tokenizers.processors.TemplateProcessing)"
        )
    budget = max_length - num_special
    if budget < 1:
        raise ValueError(
            f"max_length={max_length} leaves no room for text after {num_special} special tokens"
        )

    n = len(examples)
    arrays = {
        name: np.zeros((n, max_length), np.int32)
        for name in ("input_ids", "token_type_ids", "attention_mask")
    }
    arrays["input_ids"].fill(pad_id)
    enc_a = tok.encode_batch([e.text_a for e in examples], add_special_tokens=False)
    enc_b = (
        tok.encode_batch([_text_b(e, task) for e in examples], add_special_tokens=False)
        if pair
        else [None] * n
    )
    for i, (a, b) in enumerate(zip(enc_a, enc_b, strict=True)):
        if b is None:
            keep_a, keep_b = min(len(a), budget), 0
        else:
            keep_a, keep_b = truncate_pair(len(a), len(b), budget)
        # Encoding.truncate keeps the head (direction 'right'), as BERT's pop() does.
        if keep_a < len(a):
            a.truncate(keep_a)
        if b is not None and keep_b < len(b):
            b.truncate(keep_b)
        full = tok.post_process(a, b, add_special_tokens=True)
        length = len(full.ids)
        arrays["input_ids"][i, :length] = full.ids
        arrays["token_type_ids"][i, :length] = full.type_ids
        arrays["attention_mask"][i, :length] = full.attention_mask
    arrays["labels"] = _labels(examples, task)
    return arrays


def _text_b(example: Example, task: GlueTask) -> str:
    if example.text_b is None:
        raise ValueError(f"{task.name} example {example.guid!r} has no second text")
    return example.text_b


def _labels(examples: Sequence[Example], task: GlueTask) -> np.ndarray:
    if task.is_regression:
        return np.array([np.nan if e.label is None else e.label for e in examples], np.float32)
    return np.array([MISSING_CLASS if e.label is None else e.label for e in examples], np.int32)
