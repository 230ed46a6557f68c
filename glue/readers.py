"""Readers for the original GLUE TSV files, as download_glue_data.py leaves them.

Layout: `<glue_dir>/<task name>/<split file>`, e.g. `glue_data/MNLI/dev_matched.tsv`
(folder and file names in tasks.py). Columns are looked up by header name,
so extra or reordered columns (MNLI's label1..label5, QQP's qid1/qid2) do not
matter; only CoLA's train/dev files have no header and are read by position.

Why `csv.QUOTE_NONE`: the official files contain unbalanced double quotes
(e.g. MRPC dev row 1 starts with `"The foodservice...`); with the default
quoting the csv module would swallow the following lines into one field. Why
'utf-8-sig': MRPC's train/dev files begin with a UTF-8 byte-order mark,
inherited from the MSRP source, which would otherwise become part of the
first header name ("\\ufeffQuality").

Texts are kept verbatim (SST-2 sentences end in a space; the tokenizer
ignores it). Blank lines are skipped; anything else malformed raises one
`GlueDataError` naming the file and line.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterator
from pathlib import Path

from glue.tasks import Example, GlueDataError, GlueTask, get_task, is_labeled

PathLike = str | os.PathLike[str]


def split_path(task: str | GlueTask, glue_dir: PathLike, split: str) -> Path:
    """Where download_glue_data.py puts `split` of `task` under `glue_dir`."""
    task = get_task(task)
    task.check_split(split)
    return Path(glue_dir) / task.name / task.split_files[split]


def read_split(task: str | GlueTask, glue_dir: PathLike, split: str) -> list[Example]:
    """Reads one split of one task from the GLUE folder `glue_dir` (e.g. 'glue_data')."""
    task = get_task(task)
    path = split_path(task, glue_dir, split)
    if not path.is_file():
        raise GlueDataError(
            f"{path}: no such file; expected GLUE {task.name} split {split!r} at "
            f"<glue_dir>/{task.name}/{task.split_files[split]} (download_glue_data.py layout)"
        )
    return read_tsv(task, path, labeled=is_labeled(split))


def read_tsv(task: str | GlueTask, path: PathLike, *, labeled: bool) -> list[Example]:
    """Reads one GLUE TSV file of `task`; `labeled` is False for test files."""
    task = get_task(task)
    path = Path(path)
    rows = _rows(path)
    if labeled and task.headerless_labeled is not None:
        examples = _read_headerless(task, path, rows)
    else:
        examples = _read_with_header(task, path, rows, labeled)
    if not examples:
        raise GlueDataError(f"{path}: no data rows")
    return examples


def _rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Yields (1-based line number, fields) for every non-blank line."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            for row in reader:
                # QUOTE_NONE means one record per physical line, so line_num is
                # the line number an editor shows.
                if row:
                    yield reader.line_num, row
        except UnicodeDecodeError as e:
            raise GlueDataError(f"{path}: not valid UTF-8 after line {reader.line_num}: {e}") from e
        except csv.Error as e:
            raise GlueDataError(f"{path}:{reader.line_num}: {e}") from e


def _read_headerless(
    task: GlueTask, path: Path, rows: Iterator[tuple[int, list[str]]]
) -> list[Example]:
    label_pos, text_pos, num_fields = task.headerless_labeled  # type: ignore[misc]
    examples = []
    for number, (line, row) in enumerate(rows):
        if len(row) != num_fields:
            raise GlueDataError(
                f"{path}:{line}: expected {num_fields} tab-separated fields "
                f"({task.name} train/dev files have no header), got {len(row)}"
            )
        label = _parse_label(task, row[label_pos], path, line)
        examples.append(Example(str(number), row[text_pos], None, label))
    return examples


def _read_with_header(
    task: GlueTask, path: Path, rows: Iterator[tuple[int, list[str]]], labeled: bool
) -> list[Example]:
    first = next(rows, None)
    if first is None:
        raise GlueDataError(f"{path}: empty file; expected a header line")
    header_line, header = first
    text_a, text_b = task.text_columns
    required = [c for c in (text_a, text_b) if c is not None]
    # Test files must carry their ids: submissions are keyed by them.
    required.append(task.label_column if labeled else task.index_column)
    missing = [c for c in required if c not in header]
    if missing:
        kind = "train/dev" if labeled else "test"
        raise GlueDataError(
            f"{path}:{header_line}: header lacks column(s) {missing} of a {task.name} {kind} "
            f"file; header is {header}"
        )
    col = {name: i for i, name in enumerate(header)}
    a_pos = col[text_a]
    b_pos = col[text_b] if text_b is not None else None
    label_pos = col[task.label_column] if labeled else None
    index_pos = col.get(task.index_column) if task.index_column else None

    examples = []
    for number, (line, row) in enumerate(rows):
        if len(row) != len(header):
            raise GlueDataError(
                f"{path}:{line}: expected {len(header)} tab-separated fields as in the "
                f"header, got {len(row)}"
            )
        label = _parse_label(task, row[label_pos], path, line) if label_pos is not None else None
        guid = row[index_pos] if index_pos is not None else str(number)
        examples.append(Example(guid, row[a_pos], row[b_pos] if b_pos is not None else None, label))
    return examples


def _parse_label(task: GlueTask, text: str, path: Path, line: int) -> int | float:
    if task.labels is None:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise GlueDataError(f"{path}:{line}: {task.name} score {text!r} is not a number")
        return value
    try:
        return task.labels.index(text)
    except ValueError:
        raise GlueDataError(
            f"{path}:{line}: unknown {task.name} label {text!r}; expected one of {task.labels}"
        ) from None
