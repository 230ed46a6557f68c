"""Start/end logits of every window -> one answer text per question (BERT's decoding).

For each window, the n_best highest start and end logits are paired; a pair is a
candidate when both tokens are context tokens, the start token has its most context in
this window (squad.features), end >= start and the span is at most max_answer_length
tokens; the best candidate over all of a question's windows (start + end logit) is the
answer, cut from the original context by the tokens' character offsets. A question
without a candidate answers "" (BERT's "empty").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from squad.data import SquadExample
from squad.features import NOT_CONTEXT, Windows


def best_answers(examples: Sequence[SquadExample], windows: Windows, start_logits: np.ndarray,
                 end_logits: np.ndarray, *, n_best: int = 20,
                 max_answer_length: int = 30) -> dict[str, str]:
    if start_logits.shape != end_logits.shape or len(start_logits) != len(windows):
        raise ValueError(f"logits {start_logits.shape}/{end_logits.shape} for "
                         f"{len(windows)} windows")
    best: dict[int, tuple[float, str]] = {}
    for w in range(len(windows)):
        index = int(windows.example_index[w])
        example = examples[index]
        offsets, allowed = windows.offsets[w], windows.max_context[w]
        starts = np.argsort(-start_logits[w], kind="stable")[:n_best]
        ends = np.argsort(-end_logits[w], kind="stable")[:n_best]
        for s in starts:
            if offsets[s, 0] == NOT_CONTEXT or not allowed[s]:
                continue
            for e in ends:
                if offsets[e, 0] == NOT_CONTEXT or e < s or e - s + 1 > max_answer_length:
                    continue
                score = float(start_logits[w, s] + end_logits[w, e])
                if index not in best or score > best[index][0]:
                    best[index] = (score, example.context[offsets[s, 0]:offsets[e, 1]])
    return {e.qid: best[i][1] if i in best else "" for i, e in enumerate(examples)}
