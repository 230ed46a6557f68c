"""glue/hub.py: the Hugging Face hub's GLUE (nyu-mll/glue) converted to examples, from
in-memory datasets with the hub's columns; no network."""

from __future__ import annotations

import datasets
import pytest

import glue
from glue import Example, GlueDataError


def _hub(columns: dict, label_names: list[str] | None = None) -> datasets.Dataset:
    features = None
    if label_names is not None:
        features = datasets.Features(
            {
                **{k: datasets.Value("string") for k in columns if k not in ("label", "idx")},
                "label": datasets.ClassLabel(names=label_names),
                "idx": datasets.Value("int32"),
            }
        )
    return datasets.Dataset.from_dict(columns, features=features)


HUB_CASES = [
    (
        "cola",
        "train",
        {"sentence": ["Good.", "Bad."], "label": [1, 0], "idx": [0, 1]},
        [Example("0", "Good.", None, 1), Example("1", "Bad.", None, 0)],
    ),
    (
        "sst2",
        "test",
        {"sentence": ["Fine ."], "label": [-1], "idx": [0]},
        [Example("0", "Fine .", None, None)],
    ),
    (
        "mrpc",
        "dev",
        {"sentence1": ["A."], "sentence2": ["B."], "label": [1], "idx": [3]},
        [Example("3", "A.", "B.", 1)],
    ),
    (
        "stsb",
        "dev",
        {"sentence1": ["A."], "sentence2": ["B."], "label": [3.8], "idx": [0]},
        [Example("0", "A.", "B.", pytest.approx(3.8))],
    ),
    (
        "stsb",
        "test",
        {"sentence1": ["A."], "sentence2": ["B."], "label": [-1.0], "idx": [0]},
        [Example("0", "A.", "B.", None)],
    ),
    (
        "qqp",
        "train",
        {"question1": ["Q1?"], "question2": ["Q2?"], "label": [0], "idx": [9]},
        [Example("9", "Q1?", "Q2?", 0)],
    ),
    (
        "mnli",
        "dev_mismatched",
        {"premise": ["P."], "hypothesis": ["H."], "label": [2], "idx": [0]},
        [Example("0", "P.", "H.", 2)],
    ),
    (
        "mnli",
        "test_matched",
        {"premise": ["P."], "hypothesis": ["H."], "label": [-1], "idx": [5]},
        [Example("5", "P.", "H.", None)],
    ),
    (
        "qnli",
        "dev",
        {"question": ["Q?"], "sentence": ["S."], "label": [1], "idx": [0]},
        [Example("0", "Q?", "S.", 1)],
    ),
    (
        "rte",
        "train",
        {"sentence1": ["A."], "sentence2": ["B."], "label": [0], "idx": [0]},
        [Example("0", "A.", "B.", 0)],
    ),
    (
        "wnli",
        "test",
        {"sentence1": ["A."], "sentence2": ["B."], "label": [-1], "idx": [0]},
        [Example("0", "A.", "B.", None)],
    ),
]


@pytest.mark.parametrize(
    "task,split,columns,expected", HUB_CASES, ids=[f"{c[0]}-{c[1]}" for c in HUB_CASES]
)
def test_examples_from_hub(task, split, columns, expected):
    assert glue.examples_from_hub(task, split, _hub(columns)) == expected


def test_load_hub_split_asks_for_the_hub_names(monkeypatch):
    # No network in tests: check what would be requested, then the conversion.
    calls = []

    def fake_load_dataset(path, name, split, **kwargs):
        calls.append((path, name, split))
        return _hub({"premise": ["P."], "hypothesis": ["H."], "label": [1], "idx": [4]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert glue.load_split("MNLI", "dev_mismatched") == [Example("4", "P.", "H.", 1)]
    assert calls == [("nyu-mll/glue", "mnli", "validation_mismatched")]


def test_hub_classlabel_names_are_checked():
    columns = {"premise": ["P."], "hypothesis": ["H."], "label": [0], "idx": [0]}
    ok = _hub(columns, ["entailment", "neutral", "contradiction"])
    assert glue.examples_from_hub("mnli", "train", ok)[0].label == 0
    # BERT's run_classifier order: id 0 would mean contradiction, not entailment.
    swapped = _hub(columns, ["contradiction", "entailment", "neutral"])
    with pytest.raises(GlueDataError, match="label names .* differ"):
        glue.examples_from_hub("mnli", "train", swapped)


@pytest.mark.parametrize(
    "task,split,columns,message",
    [
        (
            "rte",
            "dev",
            {"sentence1": ["A."], "sentence2": ["B."], "label": [-1], "idx": [7]},
            "rte split 'validation': row 0 (idx 7): label -1 is not a RTE class id",
        ),
        (
            "mnli",
            "train",
            {"sentence1": ["A."], "sentence2": ["B."], "label": [0], "idx": [0]},
            "lacks column(s) ['premise', 'hypothesis']",
        ),
        ("qnli", "test", {"question": ["Q?"], "label": [-1], "idx": [0]}, "['sentence']"),
    ],
)
def test_hub_bad_input(task, split, columns, message):
    with pytest.raises(GlueDataError) as info:
        glue.examples_from_hub(task, split, _hub(columns))
    assert message in str(info.value)
