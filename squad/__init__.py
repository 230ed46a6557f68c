"""SQuAD v1.1: the official files or hub split (data), BERT's windows with the
tokenizer's character offsets (features), n-best span decoding to whole words (decode) and the
official exact match / F1 (metrics). eval_squad.py fine-tunes on them."""

from squad.data import (
    DEV,
    TRAIN,
    Answer,
    Loaded,
    SquadDataError,
    SquadExample,
    examples_from_hub,
    load_split,
    read_json_file,
    shared_ids,
    warn_shared_ids,
)
from squad.decode import best_answers, word_span
from squad.features import Windows, make_windows
from squad.metrics import evaluate, exact_match, f1, gold_answers, normalize_answer
from squad.task import TASK, SquadTask

__all__ = ["DEV", "TASK", "TRAIN", "Answer", "Loaded", "SquadDataError", "SquadExample",
           "SquadTask", "Windows",
           "best_answers", "evaluate", "exact_match", "examples_from_hub", "f1",
           "gold_answers", "load_split", "make_windows", "normalize_answer",
           "read_json_file", "shared_ids", "warn_shared_ids", "word_span"]
