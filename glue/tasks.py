"""The nine GLUE tasks: labels, columns, splits, metrics and submission names.

One frozen `GlueTask` per task holds everything the readers, the hub loader,
the metrics and the submission writer need, so adding a task (or fixing a
column name) is a change in exactly one place.

Label ids index `GlueTask.labels`, the label strings as they appear in the GLUE
TSV files and in the submission files. Their order equals the `ClassLabel`
order of the Hugging Face hub's `nyu-mll/glue` (e.g. MNLI: entailment,
neutral, contradiction), so an id means the same class whichever source the
examples came from; the hub loader checks this against the hub's own names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

# Canonical split names. MNLI has two dev and two test splits; every other
# task has one of each.
TRAIN = "train"
DEV = "dev"
TEST = "test"


class GlueDataError(ValueError):
    """Bad GLUE input: the message names the file (or hub split) and the line (or row)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Example:
    """One GLUE example.

    guid: the example's id in its source: the file's index/id column when it
      has one, else the 0-based data-row number; the hub's `idx`. Test-set
      submissions are keyed by it, so it is kept verbatim.
    label: class id into `GlueTask.labels`, a float for STS-B, None on test.
    """

    guid: str
    text_a: str
    text_b: str | None
    label: int | float | None


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """Static description of one GLUE task (see the module docstring)."""

    name: str  # official name, also the data folder: CoLA, SST-2, ..., MNLI
    labels: tuple[str, ...] | None  # label strings in id order; None: regression (STS-B)
    # TSV layout as download_glue_data.py leaves it (header names; see readers.py).
    text_columns: tuple[str, str | None]  # (text_a, text_b or None for single sentence)
    label_column: str  # header name of the gold label on train/dev files
    index_column: str | None  # header name of the example id ("index", QQP "id")
    split_files: Mapping[str, str]  # split -> file name inside the task folder
    official_sizes: Mapping[str, int]  # split -> number of data rows in GLUE's files
    # Metrics (metrics.py); `main_metric` is the number the BERT paper's GLUE table shows.
    metric_names: tuple[str, ...]
    main_metric: str
    # Test split -> file name GLUE's submission server expects.
    submission_files: Mapping[str, str]
    # Hugging Face hub (`nyu-mll/glue`): config name, text columns, split names
    # and ClassLabel names (in hub id order) for the consistency check.
    hub_config: str
    hub_text_columns: tuple[str, str | None]
    hub_splits: Mapping[str, str]
    hub_label_names: tuple[str, ...] | None
    # CoLA's train/dev files have no header: (label position, sentence position,
    # number of fields). None for every other file.
    headerless_labeled: tuple[int, int, int] | None = None

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        """Output width of the classifier head (1 for STS-B's regression)."""
        return 1 if self.labels is None else len(self.labels)

    @property
    def is_pair(self) -> bool:
        return self.text_columns[1] is not None

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.split_files)

    @property
    def dev_splits(self) -> tuple[str, ...]:
        return tuple(s for s in self.split_files if s.startswith(DEV))

    @property
    def test_splits(self) -> tuple[str, ...]:
        return tuple(s for s in self.split_files if s.startswith(TEST))

    def check_split(self, split: str) -> None:
        if split not in self.split_files:
            raise ValueError(f"{self.name} has no split {split!r}; choose one of {self.splits}")


def is_labeled(split: str) -> bool:
    """GLUE's test splits carry no labels (hub: -1); train and dev splits do."""
    return not split.startswith(TEST)


_STANDARD_FILES = {TRAIN: "train.tsv", DEV: "dev.tsv", TEST: "test.tsv"}
_STANDARD_HUB = {TRAIN: "train", DEV: "validation", TEST: "test"}
_BINARY = ("0", "1")

TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask(
            name="CoLA",
            labels=_BINARY,  # 0 unacceptable, 1 acceptable
            text_columns=("sentence", None),
            label_column="label",
            index_column="index",
            split_files=_STANDARD_FILES,
            official_sizes={TRAIN: 8551, DEV: 1043, TEST: 1063},
            metric_names=("mcc",),
            main_metric="mcc",
            submission_files={TEST: "CoLA.tsv"},
            hub_config="cola",
            hub_text_columns=("sentence", None),
            hub_splits=_STANDARD_HUB,
            hub_label_names=("unacceptable", "acceptable"),
            # source, label, original label ('*' when unacceptable, else empty), sentence
            headerless_labeled=(1, 3, 4),
        ),
        GlueTask(
            name="SST-2",
            labels=_BINARY,  # 0 negative, 1 positive
            text_columns=("sentence", None),
            label_column="label",
            index_column="index",  # test only; train/dev rows are numbered
            split_files=_STANDARD_FILES,
            official_sizes={TRAIN: 67349, DEV: 872, TEST: 1821},
            metric_names=("accuracy",),
            main_metric="accuracy",
            submission_files={TEST: "SST-2.tsv"},
            hub_config="sst2",
            hub_text_columns=("sentence", None),
            hub_splits=_STANDARD_HUB,
            hub_label_names=("negative", "positive"),
        ),
        GlueTask(
            name="MRPC",
            labels=_BINARY,  # 0 not equivalent, 1 equivalent
            text_columns=("#1 String", "#2 String"),
            label_column="Quality",
            index_column="index",  # test only; train/dev rows are numbered
            split_files=_STANDARD_FILES,
            official_sizes={TRAIN: 3668, DEV: 408, TEST: 1725},
            metric_names=("f1", "accuracy"),
            main_metric="f1",
            submission_files={TEST: "MRPC.tsv"},
            hub_config="mrpc",
            hub_text_columns=("sentence1", "sentence2"),
            hub_splits=_STANDARD_HUB,
            hub_label_names=("not_equivalent", "equivalent"),
        ),
        GlueTask(
            name="STS-B",
            labels=None,  # similarity score in [0, 5]
            text_columns=("sentence1", "sentence2"),
            label_column="score",
            index_column="index",
            split_files=_STANDARD_FILES,
            official_sizes={TRAIN: 5749, DEV: 1500, TEST: 1379},
            metric_names=("pearson", "spearman"),
            main_metric="spearman",
            submission_files={TEST: "STS-B.tsv"},
            hub_config="stsb",
            hub_text_columns=("sentence1", "sentence2"),
            hub_splits=_STANDARD_HUB,
            hub_label_names=None,
        ),
        GlueTask(
            name="QQP",
            labels=_BINARY,  # 0 not duplicate, 1 duplicate
            text_columns=("question1", "question2"),
            label_column="is_duplicate",
            index_column="id",
            split_files=_STANDARD_FILES,
            official_sizes={TRAIN: 363846, DEV: 40430, TEST: 390965},
            metric_names=("f1", "accuracy"),
            main_metric="f1",
            submission_files={TEST: "QQP.tsv"},
            hub_config="qqp",
            hub_text_columns=("question1", "question2"),
            hub_splits=_STANDARD_HUB,
            hub_label_names=("not_duplicate", "duplicate"),
        ),
        GlueTask(
            name="MNLI",
            labels=("entailment", "neutral", "contradiction"),
            text_columns=("sentence1", "sentence2"),
            label_column="gold_label",  # train has label1, dev label1..label5; gold is last
            index_column="index",
            split_files={
                TRAIN: "train.tsv",
                "dev_matched": "dev_matched.tsv",
                "dev_mismatched": "dev_mismatched.tsv",
                "test_matched": "test_matched.tsv",
                "test_mismatched": "test_mismatched.tsv",
            },
            official_sizes={
                TRAIN: 392702,
                "dev_matched": 9815,
                "dev_mismatched": 9832,
                "test_matched": 9796,
                "test_mismatched": 9847,
            },
            metric_names=("accuracy",),
            main_metric="accuracy",
            submission_files={"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"},
            hub_config="mnli",
            hub_text_columns=("premise", "hypothesis"),
            hub_splits={
                TRAIN: "train",
                "dev_matched": "validation_matched",
                "dev_mismatched": "validation_mismatched",
                "test_matched": "test_matched",
                "test_mismatched": "test_mismatched",
            },
            hub_label_names=("entailment", "neutral", "contradiction"),
        ),
        GlueTask(
            name="QNLI",
            labels=("entailment", "not_entailment"),
            text_columns=("question", "sentence"),
            label_column="label",
            index_column="index",
            split_files=_STANDARD_FILES,
            official_sizes={TRAIN: 104743, DEV: 5463, TEST: 5463},
            metric_names=("accuracy",),
            main_metric="accuracy",
            submission_files={TEST: "QNLI.tsv"},
            hub_config="qnli",
            hub_text_columns=("question", "sentence"),
            hub_splits=_STANDARD_HUB,
            hub_label_names=("entailment", "not_entailment"),
        ),
        GlueTask(
            name="RTE",
            labels=("entailment", "not_entailment"),
            text_columns=("sentence1", "sentence2"),
            label_column="label",
            index_column="index",
            split_files=_STANDARD_FILES,
            official_sizes={TRAIN: 2490, DEV: 277, TEST: 3000},
            metric_names=("accuracy",),
            main_metric="accuracy",
            submission_files={TEST: "RTE.tsv"},
            hub_config="rte",
            hub_text_columns=("sentence1", "sentence2"),
            hub_splits=_STANDARD_HUB,
            hub_label_names=("entailment", "not_entailment"),
        ),
        GlueTask(
            name="WNLI",
            labels=_BINARY,  # 0 not entailment, 1 entailment (ints in the files)
            text_columns=("sentence1", "sentence2"),
            label_column="label",
            index_column="index",
            split_files=_STANDARD_FILES,
            official_sizes={TRAIN: 635, DEV: 71, TEST: 146},
            metric_names=("accuracy",),
            main_metric="accuracy",
            submission_files={TEST: "WNLI.tsv"},
            hub_config="wnli",
            hub_text_columns=("sentence1", "sentence2"),
            hub_splits=_STANDARD_HUB,
            hub_label_names=("not_entailment", "entailment"),
        ),
    )
}


def _key(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


_BY_KEY = {_key(name): task for name, task in TASKS.items()}


def get_task(task: str | GlueTask) -> GlueTask:
    """Looks a task up by name, ignoring case, '-' and '_' ("sst2", "STS-B", "mnli")."""
    if isinstance(task, GlueTask):
        return task
    found = _BY_KEY.get(_key(task))
    if found is None:
        raise ValueError(f"unknown GLUE task {task!r}; choose one of {', '.join(task_keys())}")
    return found


def is_task(name: str) -> bool:
    return _key(name) in _BY_KEY


def task_keys() -> list[str]:
    """The tasks as a config names them: cola, sst2, ..., stsb (any case, '-' and '_'
    also work)."""
    return list(_BY_KEY)
