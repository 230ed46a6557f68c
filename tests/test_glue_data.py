"""GLUE package: TSV readers on each official layout, bad input, hub conversion,
encoding, metrics against independent computations, submission files.

Every file is written here in the official layout (never read from ../shared).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import datasets
import numpy as np
import pytest
import scipy.stats
import tokenizers
from sklearn import metrics as skm
from tokenizers import models, normalizers, pre_tokenizers, processors

import glue
from glue import Example, GlueDataError

# ---------------------------------------------------------------------------
# Tiny GLUE folder in the download_glue_data.py layout
# ---------------------------------------------------------------------------

STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
MNLI_TEXT_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2"
)


def _mnli_row(i: int, a: str, b: str, labels: str = "") -> str:
    parses = "\t".join(["( x )", "( y )", "(ROOT x)", "(ROOT y)"])
    row = f"{i}\t{1000 + i}\t{1000 + i}e\tfiction\t{parses}\t{a}\t{b}"
    return row + (f"\t{labels}" if labels else "")


# task -> {file name: exact file text}, as the official files look.
FILES: dict[str, dict[str, str]] = {
    "CoLA": {
        # No header; columns: source, label, original label ('*' = unacceptable), sentence.
        "train.tsv": "gj04\t1\t\tOur friends won't buy this.\ngj04\t0\t*\tThe more we study.\n",
        # The official dev.tsv has no final newline.
        "dev.tsv": "gj04\t1\t\tThe sailors rode the breeze.",
        "test.tsv": "index\tsentence\n0\tBill whistled past the house.\n1\tThe car honked.\n",
    },
    "SST-2": {
        "train.tsv": "sentence\tlabel\nhide new secretions \t0\ncharming and affecting \t1\n",
        "dev.tsv": "sentence\tlabel\nunflinchingly bleak \t0\n",
        "test.tsv": "index\tsentence\n0\tuneasy mishmash .\n",
    },
    "MRPC": {
        # BOM from the MSRP source; an unbalanced quote that QUOTE_NONE must keep verbatim.
        "train.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        '1\t702876\t702977\t"The witness", he said.\tThe witness.\n'
        "0\t2108705\t2108831\tYucaipa owned it.\tYucaipa bought it.\n",
        "dev.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        '1\t1355540\t1355592\tThe pie business.\t"The pie business.\n',
        "test.tsv": "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        "0\t1089874\t1089925\tPCCW's officer.\tThe officer.\n",
    },
    "STS-B": {
        "train.tsv": f"{STSB_HEADER}\tscore\n"
        "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane.\tAn air plane.\t5.000\n"
        "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man.\tA flute.\t0.250\n",
        "dev.tsv": f"{STSB_HEADER}\tscore\n"
        "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA hat.\tA hard hat.\t3.8\n",
        "test.tsv": f"{STSB_HEADER}\n"
        "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl.\tA girl is.\n",
    },
    "QQP": {
        "train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
        "133273\t213221\t213222\tHow is the life?\tHow is life?\t1\n",
        "dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
        "201359\t303345\t303346\tWhy are people?\tWhy do people?\t0\n",
        "test.tsv": "id\tquestion1\tquestion2\n0\tWhy ask?\tWhy not?\n7\tHow?\tWhat?\n",
    },
    "MNLI": {
        # train: label1 + gold_label; dev: label1..label5 + gold_label; test: no labels.
        "train.tsv": f"{MNLI_TEXT_HEADER}\tlabel1\tgold_label\n"
        + _mnli_row(0, "Conceptually cream.", "Product and geography.", "neutral\tneutral")
        + "\n",
        "dev_matched.tsv": f"{MNLI_TEXT_HEADER}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5"
        "\tgold_label\n"
        + _mnli_row(
            0,
            "The new rights.",
            "Everyone likes.",
            "neutral\tentailment\tneutral\tneutral\tneutral\tneutral",
        )
        + "\n",
        "dev_mismatched.tsv": f"{MNLI_TEXT_HEADER}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5"
        "\tgold_label\n"
        + _mnli_row(
            0,
            "Your gift.",
            "Hundreds.",
            "contradiction\tcontradiction\tentailment\tcontradiction\tcontradiction\tcontradiction",
        )
        + "\n",
        "test_matched.tsv": f"{MNLI_TEXT_HEADER}\n"
        + _mnli_row(0, "Hierbas.", "Hierbas is.")
        + "\n",
        "test_mismatched.tsv": f"{MNLI_TEXT_HEADER}\n" + _mnli_row(0, "What.", "Who.") + "\n",
    },
    "QNLI": {
        "train.tsv": "index\tquestion\tsentence\tlabel\n0\tWhen?\tIn 1990.\tentailment\n",
        "dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWhat?\tAs of that day.\tnot_entailment\n",
        "test.tsv": 'index\tquestion\tsentence\n0\tWho?\tThe Brotherhood "quiescent.\n',
    },
    "RTE": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tNo weapons found.\tWeapons found."
        "\tnot_entailment\n1\tA place of sorrow.\tPope is leader.\tentailment\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tDana Reeve died.\tReeve.\tentailment\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tMangla was summoned.\tShukla.\n",
    },
    "WNLI": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin.\tIt had a hole.\t1\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe drain is clogged.\tHair.\t0\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tMaude and Dora.\tHorses ran.\n",
    },
}

EXPECTED: dict[tuple[str, str], list[Example]] = {
    ("CoLA", "train"): [
        Example("0", "Our friends won't buy this.", None, 1),
        Example("1", "The more we study.", None, 0),
    ],
    ("CoLA", "dev"): [Example("0", "The sailors rode the breeze.", None, 1)],
    ("CoLA", "test"): [
        Example("0", "Bill whistled past the house.", None, None),
        Example("1", "The car honked.", None, None),
    ],
    ("SST-2", "train"): [
        Example("0", "hide new secretions ", None, 0),
        Example("1", "charming and affecting ", None, 1),
    ],
    ("SST-2", "dev"): [Example("0", "unflinchingly bleak ", None, 0)],
    ("SST-2", "test"): [Example("0", "uneasy mishmash .", None, None)],
    ("MRPC", "train"): [
        Example("0", '"The witness", he said.', "The witness.", 1),
        Example("1", "Yucaipa owned it.", "Yucaipa bought it.", 0),
    ],
    ("MRPC", "dev"): [Example("0", "The pie business.", '"The pie business.', 1)],
    ("MRPC", "test"): [Example("0", "PCCW's officer.", "The officer.", None)],
    ("STS-B", "train"): [
        Example("0", "A plane.", "An air plane.", 5.0),
        Example("1", "A man.", "A flute.", 0.25),
    ],
    ("STS-B", "dev"): [Example("0", "A hat.", "A hard hat.", 3.8)],
    ("STS-B", "test"): [Example("0", "A girl.", "A girl is.", None)],
    ("QQP", "train"): [Example("133273", "How is the life?", "How is life?", 1)],
    ("QQP", "dev"): [Example("201359", "Why are people?", "Why do people?", 0)],
    ("QQP", "test"): [
        Example("0", "Why ask?", "Why not?", None),
        Example("7", "How?", "What?", None),
    ],
    ("MNLI", "train"): [Example("0", "Conceptually cream.", "Product and geography.", 1)],
    # gold_label, not label1, is the label.
    ("MNLI", "dev_matched"): [Example("0", "The new rights.", "Everyone likes.", 1)],
    ("MNLI", "dev_mismatched"): [Example("0", "Your gift.", "Hundreds.", 2)],
    ("MNLI", "test_matched"): [Example("0", "Hierbas.", "Hierbas is.", None)],
    ("MNLI", "test_mismatched"): [Example("0", "What.", "Who.", None)],
    ("QNLI", "train"): [Example("0", "When?", "In 1990.", 0)],
    ("QNLI", "dev"): [Example("0", "What?", "As of that day.", 1)],
    ("QNLI", "test"): [Example("0", "Who?", 'The Brotherhood "quiescent.', None)],
    ("RTE", "train"): [
        Example("0", "No weapons found.", "Weapons found.", 1),
        Example("1", "A place of sorrow.", "Pope is leader.", 0),
    ],
    ("RTE", "dev"): [Example("0", "Dana Reeve died.", "Reeve.", 0)],
    ("RTE", "test"): [Example("0", "Mangla was summoned.", "Shukla.", None)],
    ("WNLI", "train"): [Example("0", "I stuck a pin.", "It had a hole.", 1)],
    ("WNLI", "dev"): [Example("0", "The drain is clogged.", "Hair.", 0)],
    ("WNLI", "test"): [Example("0", "Maude and Dora.", "Horses ran.", None)],
}


def _write(root: Path, task: str, name: str, text: str | bytes) -> Path:
    path = root / task / name
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("glue_data")
    for task, files in FILES.items():
        for name, text in files.items():
            _write(root, task, name, text)
    return root


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------


def test_registry_covers_nine_tasks_and_their_submission_files():
    assert list(glue.TASKS) == [
        "CoLA",
        "SST-2",
        "MRPC",
        "STS-B",
        "QQP",
        "MNLI",
        "QNLI",
        "RTE",
        "WNLI",
    ]
    files = sorted(f for t in glue.TASKS.values() for f in t.submission_files.values())
    assert files == sorted(
        [
            "CoLA.tsv",
            "SST-2.tsv",
            "MRPC.tsv",
            "STS-B.tsv",
            "QQP.tsv",
            "MNLI-m.tsv",
            "MNLI-mm.tsv",
            "QNLI.tsv",
            "RTE.tsv",
            "WNLI.tsv",
        ]
    )
    assert glue.get_task("sst2") is glue.get_task("SST-2") is glue.get_task("sst_2")
    assert glue.get_task("stsb").is_regression and glue.get_task("stsb").num_labels == 1
    assert glue.get_task("mnli").num_labels == 3
    assert glue.get_task("mnli").dev_splits == ("dev_matched", "dev_mismatched")
    assert glue.get_task("cola").is_pair is False and glue.get_task("rte").is_pair
    for task in glue.TASKS.values():
        assert set(task.split_files) == set(task.hub_splits) == set(task.official_sizes)
        assert set(task.submission_files) == set(task.test_splits)
        assert task.main_metric in task.metric_names
        if task.labels is not None:
            assert len(task.labels) == len(task.hub_label_names)
    with pytest.raises(ValueError, match="unknown GLUE task 'squad'"):
        glue.get_task("squad")


# ---------------------------------------------------------------------------
# TSV readers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("task,split", sorted(EXPECTED))
def test_reader_official_layout(glue_dir: Path, task: str, split: str):
    assert glue.read_split(task, glue_dir, split) == EXPECTED[task, split]


def test_every_split_of_every_task_is_covered():
    assert {(t.name, s) for t in glue.TASKS.values() for s in t.splits} == set(EXPECTED)


def test_reader_finds_columns_by_header_name(tmp_path: Path):
    # Reordered columns plus an unknown extra one: names, not positions, decide.
    path = _write(
        tmp_path,
        "RTE",
        "dev.tsv",
        "label\textra\tsentence2\tindex\tsentence1\nentailment\tx\tB.\t42\tA.\n",
    )
    assert glue.read_tsv("rte", path, labeled=True) == [Example("42", "A.", "B.", 0)]


def test_reader_keeps_crlf_files_and_skips_blank_lines(tmp_path: Path):
    path = _write(
        tmp_path,
        "WNLI",
        "dev.tsv",
        "index\tsentence1\tsentence2\tlabel\r\n0\tA.\tB.\t1\r\n\r\n1\tC.\tD.\t0\r\n",
    )
    assert glue.read_tsv("wnli", path, labeled=True) == [
        Example("0", "A.", "B.", 1),
        Example("1", "C.", "D.", 0),
    ]


RTE_HEAD = "index\tsentence1\tsentence2\tlabel\n"
STSB_HEAD = f"{STSB_HEADER}\tscore\n"
STSB_ROW = "0\tg\tf\t2012\t0001\tnone\tnone\tA.\tB.\t"

# (task, split, file text or None for a missing file, substrings of the message).
BAD_INPUTS = [
    (
        "cola",
        "train",
        "gj04\t1\t\tGood.\ngj04\t1\tOnly three.\n",
        ["CoLA/train.tsv:2:", "expected 4 tab-separated fields", "got 3"],
    ),
    ("cola", "dev", "gj04\t2\t\tWhat.\n", ["CoLA/dev.tsv:1:", "unknown CoLA label '2'"]),
    (
        "rte",
        "dev",
        RTE_HEAD + "0\tA.\tB.\tentailment\n1\tC.\tD.\tmaybe\n",
        ["RTE/dev.tsv:3:", "unknown RTE label 'maybe'", "'not_entailment'"],
    ),
    ("rte", "train", RTE_HEAD + "0\tA.\tB.\n", ["RTE/train.tsv:2:", "expected 4", "got 3"]),
    (
        "rte",
        "test",
        RTE_HEAD.replace("index\t", "") + "A.\tB.\tentailment\n",
        ["RTE/test.tsv:1:", "header lacks column(s) ['index']"],
    ),
    (
        "sst2",
        "dev",
        "sentence\tlabel\ngood\t1\nbad\t0\textra\n",
        ["SST-2/dev.tsv:3:", "expected 2", "got 3"],
    ),
    ("sst2", "train", "text\tlabel\ngood\t1\n", ["SST-2/train.tsv:1:", "['sentence']"]),
    (
        "mrpc",
        "train",
        "\ufeff#1 ID\t#2 ID\t#1 String\t#2 String\n1\t2\tA.\tB.\n",
        ["MRPC/train.tsv:1:", "header lacks column(s) ['Quality']"],
    ),
    (
        "stsb",
        "dev",
        STSB_HEAD + STSB_ROW + "five\n",
        ["STS-B/dev.tsv:2:", "STS-B score 'five' is not a number"],
    ),
    (
        "stsb",
        "train",
        STSB_HEAD + STSB_ROW + "1.0\n" + STSB_ROW + "nan\n",
        ["STS-B/train.tsv:3:", "score 'nan' is not a number"],
    ),
    (
        "stsb",
        "dev",
        STSB_HEADER + "\n" + STSB_ROW[:-1] + "\n",
        ["STS-B/dev.tsv:1:", "header lacks column(s) ['score']"],
    ),
    ("qqp", "test", "question1\tquestion2\nA?\tB?\n", ["QQP/test.tsv:1:", "['id']"]),
    (
        "qqp",
        "dev",
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t2\t3\tA?\tB?\tyes\n",
        ["QQP/dev.tsv:2:", "unknown QQP label 'yes'"],
    ),
    (
        "mnli",
        "dev_matched",
        None,
        ["MNLI/dev_matched.tsv: no such file", "<glue_dir>/MNLI/dev_matched.tsv"],
    ),
    (
        "mnli",
        "train",
        f"{MNLI_TEXT_HEADER}\tlabel1\tgold_label\n" + _mnli_row(0, "A.", "B.", "neutral\t-") + "\n",
        ["MNLI/train.tsv:2:", "unknown MNLI label '-'"],
    ),
    ("qnli", "dev", "", ["QNLI/dev.tsv: empty file"]),
    ("wnli", "dev", RTE_HEAD, ["WNLI/dev.tsv: no data rows"]),
    ("wnli", "train", RTE_HEAD.encode() + b"0\t\xff\xfe\tB.\t1\n", ["WNLI/train.tsv:", "UTF-8"]),
]


@pytest.mark.parametrize(
    "task,split,text,expected",
    BAD_INPUTS,
    ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(BAD_INPUTS)],
)
def test_bad_input_names_file_and_line(tmp_path: Path, task, split, text, expected):
    name = glue.get_task(task).name
    if text is not None:
        _write(tmp_path, name, glue.get_task(task).split_files[split], text)
    with pytest.raises(GlueDataError) as info:
        glue.read_split(task, tmp_path, split)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert str(tmp_path) in message
    for part in expected:
        assert part in message, (part, message)


def test_check_reports_row_count_mismatch_and_bad_files(glue_dir: Path, tmp_path: Path, capsys):
    from glue.check import main

    assert main(["check", str(glue_dir)]) == 1  # tiny files: counts differ from GLUE's
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("MNLI   dev_matched"))
    assert line.split()[2:7] == ["1", "rows", "(official", "9815)", "MISMATCH"]
    _write(tmp_path, "RTE", "dev.tsv", RTE_HEAD + "0\tA.\tB.\tmaybe\n")
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "RTE    dev              ERROR" in out and "QQP    train            absent" in out


def test_unknown_split_is_rejected(glue_dir: Path):
    with pytest.raises(ValueError, match="MNLI has no split 'dev'"):
        glue.read_split("mnli", glue_dir, "dev")


# ---------------------------------------------------------------------------
# Hugging Face hub conversion (in-memory datasets with the hub's columns)
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "a",
    "dog",
    "ran",
    "play",
    "##ing",
    ".",
]
ID = {t: i for i, t in enumerate(VOCAB)}


@pytest.fixture(scope="module")
def tokenizer() -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.WordPiece(ID, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ID["[CLS]"]), ("[SEP]", ID["[SEP]"])],
    )
    return tok


def _ids(*tokens: str) -> list[int]:
    return [ID[t] for t in tokens]


def test_encode_pair_layout_and_padding(tokenizer):
    examples = [Example("0", "The cat sat.", "A dog playing", 1), Example("1", "Dog", "cat", None)]
    out = glue.encode_examples(tokenizer, examples, 12, "rte")
    assert set(out) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    assert out["input_ids"].shape == (2, 12) and out["input_ids"].dtype == np.int32
    first = _ids("[CLS]", "the", "cat", "sat", ".", "[SEP]", "a", "dog", "play", "##ing", "[SEP]")
    np.testing.assert_array_equal(out["input_ids"][0], first + [0])
    np.testing.assert_array_equal(out["token_type_ids"][0], [0] * 6 + [1] * 5 + [0])
    np.testing.assert_array_equal(out["attention_mask"][0], [1] * 11 + [0])
    np.testing.assert_array_equal(
        out["input_ids"][1], _ids("[CLS]", "dog", "[SEP]", "cat", "[SEP]") + [0] * 7
    )
    np.testing.assert_array_equal(out["token_type_ids"][1], [0, 0, 0, 1, 1] + [0] * 7)
    np.testing.assert_array_equal(out["labels"], [1, -1])
    assert tokenizer.truncation is None and tokenizer.padding is None  # caller's is untouched


@pytest.mark.parametrize(
    "len_a,len_b,budget,expected",
    [
        (2, 2, 5, (2, 2)),  # fits: untouched
        (10, 1, 5, (4, 1)),  # only the longer one is cut
        (3, 5, 5, (3, 2)),  # B longer, odd budget: BERT cuts B to below A
        (10, 12, 5, (3, 2)),  # both long: A keeps the extra token (ties pop from B)
        (12, 10, 5, (3, 2)),
        (2, 20, 6, (2, 4)),
    ],
)
def test_truncate_pair_matches_bert(len_a, len_b, budget, expected):
    assert glue.truncate_pair(len_a, len_b, budget) == expected


def test_encode_truncates_longest_first_from_the_end(tokenizer):
    # A has 3 tokens, B 5; max_length 8 leaves 5 for text: BERT keeps A[:3], B[:2].
    example = Example("0", "the cat sat", "a dog ran on the", 0)
    out = glue.encode_examples(tokenizer, [example], 8, "mrpc")
    np.testing.assert_array_equal(
        out["input_ids"][0], _ids("[CLS]", "the", "cat", "sat", "[SEP]", "a", "dog", "[SEP]")
    )
    np.testing.assert_array_equal(out["token_type_ids"][0], [0] * 5 + [1] * 3)
    np.testing.assert_array_equal(out["attention_mask"][0], [1] * 8)


def test_encode_single_sentence_and_regression_labels(tokenizer):
    examples = [Example("0", "the cat sat on the mat", None, 1), Example("1", "dog", None, 0)]
    out = glue.encode_examples(tokenizer, examples, 5, "cola")
    np.testing.assert_array_equal(
        out["input_ids"],
        [_ids("[CLS]", "the", "cat", "sat", "[SEP]"), _ids("[CLS]", "dog", "[SEP]") + [0, 0]],
    )
    assert not out["token_type_ids"].any()
    pairs = [Example("0", "a", "b", 2.5), Example("1", "a", "b", None)]
    labels = glue.encode_examples(tokenizer, pairs, 8, "stsb")["labels"]
    assert labels.dtype == np.float32 and labels[0] == 2.5 and math.isnan(labels[1])
    with pytest.raises(ValueError, match="no room"):
        glue.encode_examples(tokenizer, examples, 2, "cola")


# ---------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------


def test_metrics_hand_checked():
    # TP=1, FP=1, TN=2, FN=0.
    preds, labels = np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0])
    assert glue.compute_metrics("cola", preds, labels) == {
        "mcc": pytest.approx(100 * 2 / math.sqrt(12))
    }
    assert glue.compute_metrics("mrpc", preds, labels) == {
        "f1": pytest.approx(100 * 2 / 3),
        "accuracy": pytest.approx(75.0),
    }
    # Pearson of (1, 2, 3) and (1, 2, 4) = 3 / sqrt(2 * 42/9); ranks agree exactly.
    sts = glue.compute_metrics("stsb", np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]))
    assert sts == {
        "pearson": pytest.approx(100 * 3 / math.sqrt(2 * 42 / 9)),
        "spearman": pytest.approx(100.0),
    }
    # Logits are argmaxed: predictions 0, 2, 1 against 0, 2, 2.
    logits = np.array([[3.0, 1.0, 0.0], [0.0, 1.0, 2.0], [0.0, 5.0, 1.0]])
    assert glue.compute_metrics("mnli", logits, np.array([0, 2, 2])) == {
        "accuracy": pytest.approx(200 / 3)
    }


def _numpy_mcc(p: np.ndarray, y: np.ndarray) -> float:
    tp, tn = np.sum((p == 1) & (y == 1)), np.sum((p == 0) & (y == 0))
    fp, fn = np.sum((p == 1) & (y == 0)), np.sum((p == 0) & (y == 1))
    return (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))


def test_metrics_agree_with_independent_computations():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    p = np.where(rng.random(500) < 0.7, y, 1 - y)
    cola = glue.compute_metrics("cola", p, y)
    assert cola["mcc"] == pytest.approx(100 * _numpy_mcc(p, y))
    assert cola["mcc"] == pytest.approx(100 * skm.matthews_corrcoef(y, p))
    qqp = glue.compute_metrics("qqp", p, y)
    tp = np.sum((p == 1) & (y == 1))
    assert qqp["f1"] == pytest.approx(100 * 2 * tp / (np.sum(p == 1) + np.sum(y == 1)))
    assert qqp["accuracy"] == pytest.approx(100 * np.mean(p == y))

    y3, p3 = rng.integers(0, 3, 300), rng.integers(0, 3, 300)
    assert glue.compute_metrics("mnli", p3, y3)["accuracy"] == pytest.approx(
        100 * skm.accuracy_score(y3, p3)
    )

    scores = rng.uniform(0, 5, 400)
    noisy = scores + rng.normal(0, 1.0, 400)
    sts = glue.compute_metrics("stsb", noisy[:, None], scores)  # [N, 1] head output
    assert sts["pearson"] == pytest.approx(100 * np.corrcoef(noisy, scores)[0, 1])
    ranks = [np.argsort(np.argsort(v)) for v in (noisy, scores)]  # no ties in floats
    assert sts["spearman"] == pytest.approx(100 * np.corrcoef(*ranks)[0, 1])
    assert sts["spearman"] == pytest.approx(100 * scipy.stats.spearmanr(noisy, scores)[0])


def test_metrics_reject_missing_labels_and_shape_mismatch():
    with pytest.raises(ValueError, match="class ids"):
        glue.compute_metrics("rte", np.array([0, 1]), np.array([0, -1]))
    with pytest.raises(ValueError, match="same non-empty"):
        glue.compute_metrics("rte", np.array([0, 1, 1]), np.array([0, 1]))


def test_glue_average_reproduces_bert_paper():
    # BERT paper Table 1 (test), main scores; Average column 79.6 (base), 82.1 (large).
    base = {
        "MNLI-m": 84.6,
        "MNLI-mm": 83.4,
        "QQP": 71.2,
        "QNLI": 90.5,
        "SST-2": 93.5,
        "CoLA": 52.1,
        "STS-B": 85.8,
        "MRPC": 88.9,
        "RTE": 66.4,
        "WNLI": 65.1,
    }
    large = {
        "MNLI-m": 86.7,
        "MNLI-mm": 85.9,
        "QQP": 72.1,
        "QNLI": 92.7,
        "SST-2": 94.9,
        "CoLA": 60.5,
        "STS-B": 86.5,
        "MRPC": 89.3,
        "RTE": 70.1,
    }
    assert round(glue.glue_average(base), 1) == 79.6
    assert round(glue.glue_average(large), 1) == 82.1
    del large["MNLI-mm"]
    with pytest.raises(ValueError, match="MNLI-mm"):
        glue.glue_average(large)


def test_main_score_and_score_names():
    assert glue.main_score("mrpc", {"f1": 88.9, "accuracy": 84.0}) == 88.9
    assert glue.main_score("stsb", {"pearson": 87.1, "spearman": 85.8}) == 85.8
    assert glue.score_name("mnli", "dev_matched") == "MNLI-m"
    assert glue.score_name("mnli", "test_mismatched") == "MNLI-mm"
    assert glue.score_name("sst2", "dev") == "SST-2"


# ---------------------------------------------------------------------------
# Submission files
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task,split,predictions,file_name,body",
    [
        ("rte", "test", [0, 1, 1], "RTE.tsv", ["entailment", "not_entailment", "not_entailment"]),
        ("cola", "test", np.array([1, 0, 1]), "CoLA.tsv", ["1", "0", "1"]),
        (
            "stsb",
            "test",
            np.array([4.12345, 0.0, 5.0], np.float32),
            "STS-B.tsv",
            ["4.123", "0.000", "5.000"],
        ),
        (
            "mnli",
            "test_matched",
            [2, 1, 0],
            "MNLI-m.tsv",
            ["contradiction", "neutral", "entailment"],
        ),
        (
            "mnli",
            "test_mismatched",
            [0, 0, 1],
            "MNLI-mm.tsv",
            ["entailment", "entailment", "neutral"],
        ),
        ("qqp", "test", [1, 0, 0], "QQP.tsv", ["1", "0", "0"]),
    ],
)
def test_write_submission_format(tmp_path: Path, task, split, predictions, file_name, body):
    guids = ["0", "1", "7"]
    path = glue.write_submission(task, split, guids, predictions, tmp_path / "sub")
    assert path == tmp_path / "sub" / file_name
    expected = "index\tprediction\n" + "".join(
        f"{g}\t{b}\n" for g, b in zip(guids, body, strict=True)
    )
    assert path.read_text() == expected
    assert os.listdir(path.parent) == [file_name]  # no temporary file left behind


def test_write_submission_bad_input_leaves_previous_file(tmp_path: Path):
    path = glue.write_submission("rte", "test", ["0"], [0], tmp_path)
    with pytest.raises(ValueError, match="not a class id"):
        glue.write_submission("rte", "test", ["0", "1"], [0, 2], tmp_path)
    with pytest.raises(ValueError, match="not finite"):
        glue.write_submission("stsb", "test", ["0"], [float("nan")], tmp_path)
    with pytest.raises(ValueError, match="not a test split"):
        glue.write_submission("rte", "dev", ["0"], [0], tmp_path)
    with pytest.raises(ValueError, match="2 guids"):
        glue.write_submission("rte", "test", ["0", "1"], [0], tmp_path)
    assert path.read_text() == "index\tprediction\n0\tentailment\n"
    assert sorted(os.listdir(tmp_path)) == ["RTE.tsv"]


def test_reader_guids_round_trip_into_submission(glue_dir: Path, tmp_path: Path):
    test = glue.read_split("qqp", glue_dir, "test")
    path = glue.write_submission("qqp", "test", [e.guid for e in test], [1, 0], tmp_path)
    assert path.read_text().splitlines()[1:] == ["0\t1", "7\t0"]
