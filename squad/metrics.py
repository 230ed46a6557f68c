"""SQuAD v1.1 exact match and F1, as the official evaluation script defines them.

evaluate-v1.1.py (rajpurkar.github.io/SQuAD-explorer): an answer is normalised by
lower-casing, removing ASCII punctuation (Python's `string.punctuation`: curly quotes,
dashes and other unicode punctuation stay), removing the articles a/an/the as words and
collapsing whitespace; EM is 1 when the normalised prediction equals a normalised gold
answer, F1 is the token-level F1 of bags of whitespace tokens; each takes the maximum over
the question's gold answers, and the scores are percentages over every question of the
dev file (a question without a prediction scores 0). These are the numbers the papers'
SQuAD columns report.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable, Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    same = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
    if same == 0:  # also when either side normalises to nothing (v1.1; v2.0 differs)
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def best_over_gold(metric, prediction: str, golds: Sequence[str]) -> float:
    return max(metric(prediction, gold) for gold in golds)


def evaluate(golds: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
             ) -> dict[str, float]:
    """{'exact_match', 'f1'} in percent over every question of `golds` ({id: gold
    answer texts}); `unanswered` counts the questions `predictions` lacks (scored 0)."""
    if not golds:
        raise ValueError("no questions to score")
    em = f1_sum = 0.0
    unanswered = 0
    for qid, answers in golds.items():
        if qid not in predictions:
            unanswered += 1
            continue
        em += best_over_gold(exact_match, predictions[qid], answers)
        f1_sum += best_over_gold(f1, predictions[qid], answers)
    return {"exact_match": 100.0 * em / len(golds), "f1": 100.0 * f1_sum / len(golds),
            "unanswered": float(unanswered)}


def gold_answers(examples: Iterable) -> dict[str, list[str]]:
    """{question id: its gold answer texts} of squad.data.SquadExample-like objects."""
    return {e.qid: [a.text for a in e.answers] for e in examples}
