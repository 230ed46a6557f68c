"""Questions -> BERT's windows over their contexts, with each token's character span.

BERT's run_squad.py recipe: the question is cut to max_query_length tokens; the context
is covered by windows of max_seq_length - len(question) - 3 tokens, each starting
doc_stride tokens after the previous one (`[CLS] question [SEP] window [SEP]`, type ids
0 then 1); a training window whose span does not hold the whole answer points both ends
at [CLS] (position 0). Token-to-character alignment is the tokenizer's own offsets
(`tokenizers` tracks them through normalisation), so an answer is mapped back to the
exact characters of the original context. A token in several windows is predicted only
from the window where it has the most context (BERT's _check_is_max_context: the larger
min(left, right) + 0.01 x window length, the first on ties).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import tokenizers

from squad.data import SquadExample

# Offsets of a token that is not part of the context ([CLS], question, [SEP], padding).
NOT_CONTEXT = -1


@dataclasses.dataclass
class Windows:
    arrays: dict[str, np.ndarray]  # input_ids, token_type_ids, attention_mask (N, L);
    # start_positions, end_positions (N,): the answer's tokens in the window, 0 = [CLS]
    example_index: np.ndarray  # (N,) the example (question) each window belongs to
    offsets: np.ndarray  # (N, L, 2) character [start, end) of each context token, else -1
    max_context: np.ndarray  # (N, L) bool: this window is the token's best one
    unlocatable: int = 0  # training answers no token covers (skipped, counted)

    def __len__(self) -> int:
        return len(self.example_index)


def doc_spans(num_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) of each window over `num_tokens` context tokens, BERT's loop."""
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, stride)
    return spans or [(0, 0)]


def max_context_mask(spans: Sequence[tuple[int, int]], num_tokens: int) -> np.ndarray:
    """(windows, num_tokens) bool: True where the window is the token's best."""
    position = np.arange(num_tokens)
    scores = np.full((len(spans), num_tokens), -np.inf)
    for w, (start, length) in enumerate(spans):
        inside = (position >= start) & (position < start + length)
        left, right = position - start, start + length - 1 - position
        scores[w, inside] = (np.minimum(left, right) + 0.01 * length)[inside]
    best = np.argmax(scores, axis=0)  # the first window on ties
    return np.arange(len(spans))[:, None] == best[None, :]


def special_ids(tokenizer: tokenizers.Tokenizer) -> tuple[int, int]:
    ids = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if None in ids:
        raise ValueError("the tokenizer has no [CLS] or [SEP] token (not a BERT tokenizer)")
    return ids


def answer_tokens(offsets: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """First and last context token overlapping characters [start, end); None if none."""
    covering = np.nonzero((offsets[:, 1] > start) & (offsets[:, 0] < end))[0]
    return (int(covering[0]), int(covering[-1])) if len(covering) else None


def make_windows(tokenizer: tokenizers.Tokenizer, examples: Sequence[SquadExample], *,
                 max_seq_length: int = 384, doc_stride: int = 128,
                 max_query_length: int = 64, training: bool) -> Windows:
    """Every window of every example (training: examples whose answer no token covers are
    skipped and counted in `unlocatable`)."""
    if max_seq_length < max_query_length + 4:
        raise ValueError(f"max_seq_length={max_seq_length} leaves no room for the context "
                         f"after max_query_length={max_query_length} and 3 special tokens")
    if doc_stride < 1:
        raise ValueError(f"doc_stride={doc_stride} must be at least 1")
    tok = tokenizers.Tokenizer.from_str(tokenizer.to_str())  # the caller's stays as it is
    tok.no_truncation()
    tok.no_padding()
    cls_id, sep_id = special_ids(tok)
    questions = tok.encode_batch([e.question for e in examples], add_special_tokens=False)
    distinct = list(dict.fromkeys(e.context for e in examples))  # a paragraph's questions
    contexts = dict(zip(distinct, tok.encode_batch(distinct, add_special_tokens=False),
                        strict=True))
    rows: dict[str, list] = {k: [] for k in ("input_ids", "token_type_ids", "start", "end",
                                             "example", "offsets", "max_context")}
    unlocatable = 0
    for index, example in enumerate(examples):
        query = questions[index].ids[:max_query_length]
        context = contexts[example.context]
        char_spans = np.asarray(context.offsets, np.int32).reshape(-1, 2)
        span_tokens = None
        if training:
            answer = example.answer
            span_tokens = answer_tokens(char_spans, answer.start,
                                        answer.start + len(answer.text))
            if span_tokens is None:
                unlocatable += 1
                continue
        spans = doc_spans(len(context.ids), max_seq_length - len(query) - 3, doc_stride)
        best = max_context_mask(spans, len(context.ids))
        first = len(query) + 2  # the window's first token: after [CLS] question [SEP]
        for w, (start, length) in enumerate(spans):
            ids = [cls_id, *query, sep_id, *context.ids[start:start + length], sep_id]
            offsets = np.full((max_seq_length, 2), NOT_CONTEXT, np.int32)
            offsets[first:first + length] = char_spans[start:start + length]
            is_best = np.zeros(max_seq_length, bool)
            is_best[first:first + length] = best[w, start:start + length]
            answer_start = answer_end = 0
            if span_tokens is not None and start <= span_tokens[0] \
                    and span_tokens[1] < start + length:
                answer_start, answer_end = (t - start + first for t in span_tokens)
            rows["input_ids"].append(ids)
            rows["token_type_ids"].append([0] * first + [1] * (length + 1))
            rows["start"].append(answer_start)
            rows["end"].append(answer_end)
            rows["example"].append(index)
            rows["offsets"].append(offsets)
            rows["max_context"].append(is_best)
    count = len(rows["example"])
    arrays = {k: np.zeros((count, max_seq_length), np.int32)
              for k in ("input_ids", "token_type_ids", "attention_mask")}
    for i, (ids, types) in enumerate(zip(rows["input_ids"], rows["token_type_ids"],
                                         strict=True)):
        arrays["input_ids"][i, :len(ids)] = ids
        arrays["token_type_ids"][i, :len(ids)] = types
        arrays["attention_mask"][i, :len(ids)] = 1
    arrays["start_positions"] = np.asarray(rows["start"], np.int32)
    arrays["end_positions"] = np.asarray(rows["end"], np.int32)
    return Windows(
        arrays=arrays, example_index=np.asarray(rows["example"], np.int32),
        offsets=(np.stack(rows["offsets"]) if count
                 else np.zeros((0, max_seq_length, 2), np.int32)),
        max_context=(np.stack(rows["max_context"]) if count
                     else np.zeros((0, max_seq_length), bool)),
        unlocatable=unlocatable)
