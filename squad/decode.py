"""Start/end logits of every window -> one answer text per question (BERT's decoding).

For each window, the n_best highest start and end logits are paired; a pair is a
candidate when both tokens are context tokens, the start token has its most context in
this window (squad.features), end >= start and the span is at most max_answer_length
tokens; the best candidate over all of a question's windows (start + end logit) is the
answer, cut from the original context by the tokens' character offsets and widened to
whole words (`word_span`): a span that starts or ends inside a word (a "##" piece, or a
piece the tokenizer cut from an accented word) is extended to the word's first and last
character, so "Cormorant" is never answered as "t" or "Cormoran". Words are BERT's basic
tokenizer's: runs of characters between whitespace, with every punctuation character and
every CJK character a word by itself, so a span is never extended over a neighbouring
"." or quote, nor over the next CJK character. A question without a candidate answers ""
(BERT's "empty").

Compared with BERT's run_squad.py: it also maps a span to whole (whitespace-separated)
words of the context, but then its get_final_text trims that text back to the predicted
pieces where it can align them, so a prediction of the one piece "sk" of "skerry" stays
"sk" there and is "skerry" here; where get_final_text cannot align (normalisation changed
the length), it keeps the whole whitespace word, "Rock." with its ".", where this keeps
"Rock" (punctuation only when a predicted token is that punctuation).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np

from squad.data import SquadExample
from squad.features import NOT_CONTEXT, Windows


def is_cjk(char: str) -> bool:
    """BERT's _is_chinese_char: the CJK Unified Ideographs blocks (not Hangul or kana,
    which BERT splits at whitespace like Latin text)."""
    cp = ord(char)
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F
            or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF
            or 0x2F800 <= cp <= 0x2FA1F)


def is_punctuation(char: str) -> bool:
    """BERT's _is_punctuation: ASCII non-letters/digits ($, ^, ` included) and every
    unicode P* character."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_whitespace(char: str) -> bool:
    """BERT's _is_whitespace (space, tab, newline, return, any Zs), and whatever else
    Python calls whitespace."""
    return char.isspace() or unicodedata.category(char) == "Zs"


def in_word(char: str) -> bool:
    """A character that joins its neighbours into one word (BERT's basic tokenizer)."""
    return not (is_whitespace(char) or is_punctuation(char) or is_cjk(char))


def word_span(context: str, start: int, end: int) -> tuple[int, int]:
    """Characters [start, end) of `context` widened to whole words: the start back to the
    first character of the word holding context[start], the end on to the last character
    of the word holding context[end - 1]. Punctuation and CJK characters are one-character
    words, so a span at them, or next to them, stays as it is."""
    if not 0 <= start < end <= len(context):
        return start, end
    if in_word(context[start]):
        while start > 0 and in_word(context[start - 1]):
            start -= 1
    if in_word(context[end - 1]):
        while end < len(context) and in_word(context[end]):
            end += 1
    return start, end


def best_answers(examples: Sequence[SquadExample], windows: Windows, start_logits: np.ndarray,
                 end_logits: np.ndarray, *, n_best: int = 20, max_answer_length: int = 30,
                 whole_words: bool = True) -> dict[str, str]:
    """{question id: answer text}; `whole_words=False` cuts at the tokens' own character
    offsets (the text inside a word when a piece is predicted alone)."""
    if start_logits.shape != end_logits.shape or len(start_logits) != len(windows):
        raise ValueError(f"logits {start_logits.shape}/{end_logits.shape} for "
                         f"{len(windows)} windows")
    best: dict[int, tuple[float, int, int]] = {}
    for w in range(len(windows)):
        index = int(windows.example_index[w])
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
                    best[index] = (score, int(offsets[s, 0]), int(offsets[e, 1]))
    answers = {}
    for index, example in enumerate(examples):
        if index not in best:
            answers[example.qid] = ""
            continue
        _, start, end = best[index]
        if whole_words:
            start, end = word_span(example.context, start, end)
        answers[example.qid] = example.context[start:end]
    return answers
