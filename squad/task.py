"""SQuAD v1.1 as the result records name a fine-tuning task (training/results.py): one
dev split, exact match and F1, F1 the headline number (the papers' SQuAD column)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SquadTask:
    name: str = "SQuAD"
    dev_splits: tuple[str, ...] = ("dev",)
    test_splits: tuple[str, ...] = ()
    metric_names: tuple[str, ...] = ("exact_match", "f1")
    main_metric: str = "f1"


TASK = SquadTask()
