"""glue/submission.py: test-set predictions in the GLUE server's file format, bad input
refused without touching the previous file, the readers' ids carried through."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import glue


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


def test_reader_guids_round_trip_into_submission(official_glue_dir: Path, tmp_path: Path):
    test = glue.read_split("qqp", official_glue_dir, "test")
    path = glue.write_submission("qqp", "test", [e.guid for e in test], [1, 0], tmp_path)
    assert path.read_text().splitlines()[1:] == ["0\t1", "7\t0"]
