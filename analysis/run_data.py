"""A pretraining workdir's data, opened from its config.json's data block (the cache is
reused, nothing is re-tokenised), and the held-out sequences its eval loss averages over:
the first eval_batches x batch_size of the eval split, as input_pipeline's EvalBatches
serves them. Shared by the study tools that compare a run's loss with its data
(unigram_baseline, split_overlap)."""

from __future__ import annotations

import dataclasses
from typing import Any

from training import results


@dataclasses.dataclass(frozen=True)
class RunData:
    config: Any  # the run's ConfigDict
    data: Any  # input_pipeline's data (train, eval, special, vocab_size)
    num_evaluated: int  # the eval split's first sequences the eval loss reads


def open_run_data(workdir: str) -> RunData:
    """ValueError naming the workdir when it has no readable config.json."""
    from ml_collections import ConfigDict

    from input_pipeline import from_config

    saved = results.read_run_config(workdir)
    if saved is None:
        raise ValueError(f"{workdir}: no readable {results.RUN_CONFIG} (not a pretraining run?)")
    config = ConfigDict(saved)
    data = from_config(config.data, workdir)
    num_evaluated = min(len(data.eval), int(config.eval_batches) * int(config.batch_size))
    return RunData(config, data, num_evaluated)
