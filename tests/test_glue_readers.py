"""glue/readers.py: every task's TSV files in the official layout (helpers.
OFFICIAL_GLUE_FILES; never read from ../shared), columns by header name, CRLF, bad input
named by file and line; glue/check.py's report of a GLUE folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import MNLI_TEXT_HEADER, STSB_HEADER, mnli_row, write_glue_file

import glue
from glue import Example, GlueDataError

# What the readers return for helpers.OFFICIAL_GLUE_FILES (the official_glue_dir fixture).
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


@pytest.mark.parametrize("task,split", sorted(EXPECTED))
def test_reader_official_layout(official_glue_dir: Path, task: str, split: str):
    assert glue.read_split(task, official_glue_dir, split) == EXPECTED[task, split]


def test_every_split_of_every_task_is_covered():
    assert {(t.name, s) for t in glue.TASKS.values() for s in t.splits} == set(EXPECTED)


def test_reader_finds_columns_by_header_name(tmp_path: Path):
    # Reordered columns plus an unknown extra one: names, not positions, decide.
    path = write_glue_file(
        tmp_path,
        "RTE",
        "dev.tsv",
        "label\textra\tsentence2\tindex\tsentence1\nentailment\tx\tB.\t42\tA.\n",
    )
    assert glue.read_tsv("rte", path, labeled=True) == [Example("42", "A.", "B.", 0)]


def test_reader_keeps_crlf_files_and_skips_blank_lines(tmp_path: Path):
    path = write_glue_file(
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
        f"{MNLI_TEXT_HEADER}\tlabel1\tgold_label\n" + mnli_row(0, "A.", "B.", "neutral\t-") + "\n",
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
        write_glue_file(tmp_path, name, glue.get_task(task).split_files[split], text)
    with pytest.raises(GlueDataError) as info:
        glue.read_split(task, tmp_path, split)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert str(tmp_path) in message
    for part in expected:
        assert part in message, (part, message)


def test_check_reports_row_count_mismatch_and_bad_files(official_glue_dir: Path, tmp_path: Path,
                                                        capsys):
    from glue.check import main

    assert main(["check", str(official_glue_dir)]) == 1  # tiny files: counts differ from GLUE's
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("MNLI   dev_matched"))
    assert line.split()[2:7] == ["1", "rows", "(official", "9815)", "MISMATCH"]
    write_glue_file(tmp_path, "RTE", "dev.tsv", RTE_HEAD + "0\tA.\tB.\tmaybe\n")
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "RTE    dev              ERROR" in out and "QQP    train            absent" in out


def test_unknown_split_is_rejected(official_glue_dir: Path):
    with pytest.raises(ValueError, match="MNLI has no split 'dev'"):
        glue.read_split("mnli", official_glue_dir, "dev")
