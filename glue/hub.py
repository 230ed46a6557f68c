"""GLUE from the Hugging Face hub (`nyu-mll/glue`), converted to `Example`s.

`load_hub_split` is the only code that touches the network (or the local HF
cache); everything it returns passes through `examples_from_hub`, which is
pure and unit-tested on in-memory datasets with the hub's column names.

Hub layout: one config per task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte,
wnli), columns `idx`, `label` and the texts (tasks.py: `hub_text_columns`),
splits train/validation/test (MNLI: validation_matched, test_mismatched, ...).
Labels are `ClassLabel` ids, -1 on test splits; STS-B's label is a float.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from common import hub
from glue.tasks import Example, GlueDataError, GlueTask, get_task, is_labeled

if TYPE_CHECKING:
    import datasets

HUB_DATASET = "nyu-mll/glue"


def load_hub_split(
    task: str | GlueTask,
    split: str,
    *,
    cache_dir: str | None = None,
    revision: str | None = None,
) -> list[Example]:
    """Downloads (or reads from the HF cache) one split; `split` uses our names ('dev')."""
    import datasets  # imported here: reading TSVs must not need the hub stack

    task = get_task(task)
    task.check_split(split)
    try:
        with hub.quiet_retries():
            dataset = datasets.load_dataset(
                HUB_DATASET,
                task.hub_config,
                split=task.hub_splits[split],
                cache_dir=cache_dir,
                revision=revision,
            )
    except Exception as e:  # network, a revision or cache that does not hold it
        hint = hub.unreachable_hint(e, "--config.glue_dir=DIR of the GLUE TSVs")
        if not hint:
            raise
        raise GlueDataError(f"{HUB_DATASET}/{task.hub_config} split {task.hub_splits[split]!r}: "
                            f"cannot load ({type(e).__name__}: {e}){hint}") from e
    return examples_from_hub(task, split, dataset)


def examples_from_hub(task: str | GlueTask, split: str, dataset: datasets.Dataset) -> list[Example]:
    """Converts one hub split (a `datasets.Dataset`) to examples.

    Labels on train/dev must be valid ids (or finite floats for STS-B); on test
    splits they are ignored (the hub stores -1) and become None.
    """
    task = get_task(task)
    task.check_split(split)
    where = f"{HUB_DATASET}/{task.hub_config} split {task.hub_splits[split]!r}"
    labeled = is_labeled(split)
    text_a, text_b = task.hub_text_columns
    required = [c for c in (text_a, text_b, "idx") if c is not None]
    if labeled:
        required.append("label")
    missing = [c for c in required if c not in dataset.column_names]
    if missing:
        raise GlueDataError(
            f"{where}: lacks column(s) {missing}; columns are {dataset.column_names}"
        )
    if labeled:
        _check_label_names(task, dataset.features["label"], where)

    columns = dataset.to_dict()
    guids = columns["idx"]
    texts_a = columns[text_a]
    texts_b = columns[text_b] if text_b is not None else [None] * len(guids)
    labels = columns["label"] if labeled else [None] * len(guids)
    examples = []
    for row, (guid, a, b, label) in enumerate(zip(guids, texts_a, texts_b, labels, strict=True)):
        if labeled:
            label = _check_label(task, label, f"{where}: row {row} (idx {guid})")
        examples.append(Example(str(guid), a, b, label))
    if not examples:
        raise GlueDataError(f"{where}: no rows")
    return examples


def _check_label_names(task: GlueTask, feature: Any, where: str) -> None:
    """Guards the id order: a hub ClassLabel must list the names tasks.py expects."""
    names = getattr(feature, "names", None)
    if names is not None and tuple(names) != task.hub_label_names:
        raise GlueDataError(
            f"{where}: label names {tuple(names)} differ from the expected "
            f"{task.hub_label_names}; ids would mean different classes"
        )


def _check_label(task: GlueTask, label: Any, where: str) -> int | float:
    if task.labels is None:
        if isinstance(label, int | float) and math.isfinite(label):
            return float(label)
        raise GlueDataError(f"{where}: {task.name} score {label!r} is not a finite number")
    if isinstance(label, int) and 0 <= label < len(task.labels):
        return label
    raise GlueDataError(
        f"{where}: label {label!r} is not a {task.name} class id in [0, {len(task.labels)})"
    )
