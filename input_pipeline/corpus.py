"""Corpora for MLM pretraining: local text files, Hugging Face hub datasets, and the
offline default, the docstrings of the installed Python standard library.

Every corpus yields *documents*; a document is a list of "sentences" (lines or
paragraphs), the unit that packing keeps whole when it fits. Sentences of one
document are packed together, documents never share a sequence, and the held-out
eval split is drawn by document.

How a text stream becomes documents (one `_DocumentBuilder` for files and datasets):
  lines       BERT's create_pretraining_data format: one sentence per non-blank line,
              a blank line ends the document. The default.
  paragraphs  Project Gutenberg books (found by their `*** START OF` line): prose is
              hard-wrapped, so the lines of a paragraph are joined into one sentence
              and the whole book is one document.
  wikitext    WikiText raw files (first non-blank line is ` = Title = `): the corpus
              puts blank lines between all paragraphs, so instead a top-level heading
              starts a new article (document); headings themselves are dropped.

Corpus spec strings (`parse_corpus_spec`):
  None or "stdlib"                 the standard library docstrings (offline, ~1.5 MB)
  "hf:NAME[:CONFIG[:SPLIT[:COLUMN]]]"  e.g. "hf:wikitext:wikitext-103-raw-v1:train"
  anything else                    comma-separated files, directories and globs
"""

from __future__ import annotations

import ast
import codecs
import dataclasses
import functools
import glob
import hashlib
import io
import json
import os
import re
import sysconfig
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from absl import logging

from input_pipeline.errors import CorpusError

Document = list[str]

# Bump when the reader's output changes for the same input, so that caches keyed on
# the corpus identity are rebuilt.
READER_VERSION = 1

# Lines longer than this (characters) are cut into pieces at whitespace. A corpus
# file with no newlines at all would otherwise become one gigantic "sentence".
DEFAULT_MAX_LINE_CHARS = 100_000

_GUTENBERG_START = re.compile(r"^\*\*\*\s*START OF", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^\*\*\*\s*END OF", re.IGNORECASE)
# Credits that sit inside the START/END markers of most books.
_GUTENBERG_PRODUCED_BY = re.compile(r"^produced by\b", re.IGNORECASE)
_GUTENBERG_END_LINE = re.compile(r"^end of (the )?project gutenberg", re.IGNORECASE)

# Directories of the standard library whose docstrings are not prose worth learning
# from (test suites, the IDLE and turtle demos) or are not the standard library.
_STDLIB_SKIP_DIRS = frozenset({
    "__pycache__", "dist-packages", "ensurepip", "idle_test", "idlelib", "lib-dynload",
    "pydoc_data", "site-packages", "test", "tests", "turtledemo",
})


# --------------------------------------------------------------------------------------
# Decoding with a count of replaced bytes
# --------------------------------------------------------------------------------------

_replaced = threading.local()


def _count_and_replace(err: UnicodeError) -> tuple[str, int]:
    """Like errors="replace", but counts the replacements (per thread)."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    _replaced.count = getattr(_replaced, "count", 0) + 1
    return "\ufffd", err.end


_ERRORS = "input_pipeline_count_replace"
codecs.register_error(_ERRORS, _count_and_replace)


def _read_lines(path: Path, max_line_chars: int) -> Iterator[tuple[str, bool]]:
    """Yields (text, starts_line) for each line of a UTF-8 file, newline removed.

    A BOM is dropped and CRLF / CR become LF. A line longer than `max_line_chars` comes
    as several pieces of at most that length (cut at whitespace where there is some);
    only the first piece has starts_line=True. Memory stays O(max_line_chars) even for
    a file without any newline.
    """
    with open(path, "rb") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors=_ERRORS, newline=None)
        starts_line = True
        carry = ""  # the unfinished tail of a long line
        while True:
            chunk = text.readline(max_line_chars)
            if not chunk and not carry:
                return
            complete = not chunk or chunk.endswith("\n") or len(chunk) < max_line_chars
            pieces = _split_long_line(carry + chunk.removesuffix("\n"), max_line_chars)
            if not complete:  # more of this line follows: keep the last piece open
                carry = pieces.pop()
            for piece in pieces:
                yield piece, starts_line
                starts_line = False
            if complete:
                carry, starts_line = "", True


def _split_long_line(line: str, max_line_chars: int) -> list[str]:
    """Cuts an in-memory line into pieces of at most max_line_chars, at whitespace."""
    pieces = []
    while len(line) > max_line_chars:
        cut = max(line.rfind(" ", 0, max_line_chars), line.rfind("\t", 0, max_line_chars))
        if cut <= 0:
            pieces.append(line[:max_line_chars])
            line = line[max_line_chars:]
        else:
            pieces.append(line[:cut])
            line = line[cut + 1:]
    pieces.append(line)
    return pieces


# --------------------------------------------------------------------------------------
# Lines -> documents
# --------------------------------------------------------------------------------------


def _wikitext_heading_level(line: str) -> int:
    """1 for ' = Title = ', 2 for ' = = Section = = ', ...; 0 if not a heading."""
    s = line.strip()
    if len(s) < 5 or not (s.startswith("= ") and s.endswith(" =")):
        return 0
    level = 0
    while s.startswith("= "):
        level, s = level + 1, s[2:]
    return level


class _DocumentBuilder:
    """Collects stripped lines into documents under one layout (see module docstring)."""

    LAYOUTS = ("lines", "paragraphs", "wikitext")

    def __init__(self, layout: str = "lines", max_sentence_chars: int = DEFAULT_MAX_LINE_CHARS):
        assert layout in self.LAYOUTS, layout
        self.layout = layout
        self.max_sentence_chars = max_sentence_chars
        self.documents: list[Document] = []
        self.chars = 0  # characters kept so far, for max_chars budgets
        self._doc: Document = []
        self._para: list[str] = []
        self._para_chars = 0

    def add_line(self, line: str) -> None:
        s = line.strip()
        if self.layout == "lines":
            if s:
                self._add_sentence(s)
            else:
                self.end_document()
        elif self.layout == "paragraphs":
            if not s:
                self._end_paragraph()
                return
            self._para.append(s)
            self._para_chars += len(s) + 1
            if self._para_chars > self.max_sentence_chars:  # one huge "paragraph"
                self._end_paragraph()
        else:  # wikitext
            level = _wikitext_heading_level(s)
            if level == 1:
                self.end_document()
            elif s and not level:
                self._add_sentence(s)

    def _add_sentence(self, s: str) -> None:
        self._doc.append(s)
        self.chars += len(s)

    def _end_paragraph(self) -> None:
        if self._para:
            self._add_sentence(" ".join(self._para))
            self._para, self._para_chars = [], 0

    def end_document(self) -> None:
        self._end_paragraph()
        if self._doc:
            self.documents.append(self._doc)
            self._doc = []

    def finish(self) -> list[Document]:
        self.end_document()
        return self.documents


# --------------------------------------------------------------------------------------
# Local text files
# --------------------------------------------------------------------------------------


def _split_spec(paths: str | Sequence[str | os.PathLike]) -> list[str]:
    items = paths.split(",") if isinstance(paths, str) else [os.fspath(p) for p in paths]
    return [os.path.expanduser(p.strip()) for p in items if p.strip()]


def _files_under(directory: str) -> list[str]:
    """Regular files below a directory, sorted, hidden files and directories skipped."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(os.path.join(root, f) for f in sorted(files) if not f.startswith("."))
    return found


def expand_paths(paths: str | Sequence[str | os.PathLike]) -> list[Path]:
    """Files named by a comma-separated string (or a list) of files, directories, globs.

    Order is deterministic: items in the order given, each glob and directory sorted.
    A plain path that does not exist is an error; a glob matching nothing only warns
    (the caller raises if the corpus ends up empty).
    """
    out: list[Path] = []
    for item in _split_spec(paths):
        if any(c in item for c in "*?["):
            matches = sorted(glob.glob(item, recursive=True))
            if not matches:
                logging.warning("corpus: glob %s matches no files", item)
            for m in matches:
                out.extend(Path(f) for f in (_files_under(m) if os.path.isdir(m) else [m]))
        elif os.path.isdir(item):
            out.extend(Path(f) for f in _files_under(item))
        elif os.path.isfile(item):
            out.append(Path(item))
        else:
            raise CorpusError(f"corpus: no such file or directory: {item}")
    return list(dict.fromkeys(p.resolve() for p in out if p.is_file()))


def read_text_file(
    path: str | os.PathLike, max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    max_chars: int | None = None,
) -> tuple[list[Document], int]:
    """Reads one UTF-8 text file into documents; returns (documents, replaced).

    `replaced` counts undecodable byte sequences, each replaced by U+FFFD (the file is
    still used: a few bad bytes in a 30 MB book should not stop a run). Project
    Gutenberg boilerplate is dropped: everything up to and including the line starting
    with `*** START OF` and from the line starting with `*** END OF` on.
    """
    path = Path(path)
    builder = _DocumentBuilder("lines", max_line_chars)
    seen_text = False
    _replaced.count = 0
    try:
        for line, starts_line in _read_lines(path, max_line_chars):
            if starts_line:
                head = line.lstrip("\ufeff").lstrip()
                if _GUTENBERG_START.match(head):
                    # The header (and anything before it) is licence text: start over.
                    builder = _DocumentBuilder("paragraphs", max_line_chars)
                    continue
                if _GUTENBERG_END.match(head):
                    break
                if not seen_text and head:
                    seen_text = True
                    if builder.layout == "lines" and _wikitext_heading_level(head) == 1:
                        builder = _DocumentBuilder("wikitext", max_line_chars)
            builder.add_line(line)
            if max_chars is not None and builder.chars >= max_chars:
                break
    except OSError as e:
        raise CorpusError(f"corpus: cannot read {path}: {e.strerror or e}") from e
    docs = builder.finish()
    if builder.layout == "paragraphs":
        docs = [_drop_gutenberg_credits(d) for d in docs]
    return [d for d in docs if d], _replaced.count


def _drop_gutenberg_credits(doc: Document) -> Document:
    """Drops a leading 'Produced by ...' and any 'End of the Project Gutenberg ...'."""
    if doc and _GUTENBERG_PRODUCED_BY.match(doc[0]):
        doc = doc[1:]
    return [s for s in doc if not _GUTENBERG_END_LINE.match(s)]


@dataclasses.dataclass(frozen=True)
class TextFiles:
    """Local UTF-8 text files; `paths` as for `expand_paths`."""

    paths: tuple[str, ...]
    max_chars: int | None = None  # stop reading after about this many characters
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS

    def describe(self) -> str:
        return ",".join(self.paths)

    @functools.cached_property
    def files(self) -> list[Path]:
        return expand_paths(self.paths)

    def identity(self) -> str:
        """Paths, sizes and mtimes: cheap, and changes whenever a file is rewritten."""
        stats = []
        for f in self.files:
            st = f.stat()
            stats.append([str(f), st.st_size, st.st_mtime_ns])
        return _identity("files", stats, self.max_chars, self.max_line_chars)

    def documents(self) -> list[Document]:
        docs: list[Document] = []
        total_chars = total_replaced = 0
        for f in self.files:
            budget = None if self.max_chars is None else self.max_chars - total_chars
            file_docs, replaced = read_text_file(f, self.max_line_chars, budget)
            if replaced:
                logging.warning(
                    "corpus: %s: %d undecodable byte sequences replaced by U+FFFD", f, replaced)
            total_replaced += replaced
            docs.extend(file_docs)
            total_chars += sum(len(s) for d in file_docs for s in d)
            if self.max_chars is not None and total_chars >= self.max_chars:
                break
        if total_replaced:
            logging.warning("corpus: %d undecodable byte sequences replaced in total",
                            total_replaced)
        return _nonempty(docs, self.describe())


# --------------------------------------------------------------------------------------
# Hugging Face datasets
# --------------------------------------------------------------------------------------


def documents_from_dataset(
    dataset: Any, text_column: str = "text", *, rows_are_documents: bool | None = None,
    max_chars: int | None = None, max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    name: str = "dataset",
) -> list[Document]:
    """Maps a `datasets.Dataset` with a text column to documents.

    rows_are_documents=True: each row is one document, its non-blank lines the
    sentences (Wikipedia, BookCorpus-style rows). False: the rows are consecutive
    lines of one text stream and go through the same layouts as a file (WikiText
    rows are single lines; blank rows separate documents in the `lines` layout).
    None picks True when the first 1000 rows hold multi-line texts.
    """
    if text_column not in dataset.column_names:
        raise CorpusError(f"corpus: {name} has no column {text_column!r} "
                          f"(columns: {', '.join(dataset.column_names)})")
    if rows_are_documents is None:
        head = dataset[:1000][text_column]
        rows_are_documents = any("\n" in (t or "").strip() for t in head)
    builder: _DocumentBuilder | None = None
    for batch in dataset.iter(batch_size=1000):
        for row in batch[text_column]:
            for line in (row or "").split("\n"):
                if builder is None:  # layout decided by the first non-blank line
                    if not line.strip():
                        continue
                    level = _wikitext_heading_level(line)
                    layout = "wikitext" if level == 1 and not rows_are_documents else "lines"
                    builder = _DocumentBuilder(layout, max_line_chars)
                if rows_are_documents and not line.strip():
                    continue  # blank lines inside a row separate paragraphs, not documents
                for piece in _split_long_line(line, max_line_chars):
                    builder.add_line(piece)
            if builder is not None and rows_are_documents:
                builder.end_document()
            if builder is not None and max_chars is not None and builder.chars >= max_chars:
                return _nonempty(builder.finish(), name)
    return _nonempty(builder.finish() if builder else [], name)


@dataclasses.dataclass(frozen=True)
class HubDataset:
    """A Hugging Face hub dataset: `datasets.load_dataset(name, config, split=split)`."""

    name: str
    config: str | None = None
    split: str = "train"
    text_column: str = "text"
    max_chars: int | None = None

    def describe(self) -> str:
        return f"hf:{self.name}:{self.config or ''}:{self.split}:{self.text_column}"

    @functools.cached_property
    def dataset(self) -> Any:
        import datasets  # imported here: slow to import and only this corpus needs it

        try:
            return datasets.load_dataset(self.name, self.config, split=self.split)
        except Exception as e:  # network, unknown name or config, bad split
            raise CorpusError(f"corpus: cannot load {self.describe()}: "
                              f"{type(e).__name__}: {e}") from e

    def identity(self) -> str:
        # The fingerprint changes when the dataset's files do; loading an already
        # downloaded dataset is cheap compared with tokenizing it.
        fingerprint = getattr(self.dataset, "_fingerprint", None)
        return _identity("hf", self.describe(), fingerprint, self.max_chars)

    def documents(self) -> list[Document]:
        return documents_from_dataset(self.dataset, self.text_column,
                                      max_chars=self.max_chars, name=self.describe())


# --------------------------------------------------------------------------------------
# The offline default: standard library docstrings
# --------------------------------------------------------------------------------------


def stdlib_files(root: str | None = None) -> list[Path]:
    """The standard library's .py files, sorted, without test suites and demos."""
    root = root or sysconfig.get_paths()["stdlib"]
    found = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _STDLIB_SKIP_DIRS
                         and not d.startswith((".", "config-")))
        found.extend(Path(dirpath, f) for f in sorted(files)
                     if f.endswith(".py") and not f.startswith("test_"))
    return found


def _docstrings(node: ast.AST) -> Iterator[str]:
    """Docstrings of a module and its classes and functions, in source order."""
    if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        doc = ast.get_docstring(node, clean=True)
        if doc:
            yield doc
    for child in ast.iter_child_nodes(node):
        yield from _docstrings(child)


def docstring_document(path: str | os.PathLike) -> Document:
    """One module's docstrings as a document: one sentence per paragraph.

    Paragraph lines are joined (docstrings are hard-wrapped); doctest paragraphs
    (starting with '>>>') are code, not English, and are dropped.
    """
    try:
        with warnings.catch_warnings():  # invalid escape sequences in old modules
            warnings.simplefilter("ignore")
            tree = ast.parse(Path(path).read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return []  # e.g. a file written for another Python version
    doc: Document = []
    for text in _docstrings(tree):
        for para in re.split(r"\n\s*\n", text):
            lines = [ln.strip() for ln in para.splitlines()]
            if lines and not lines[0].startswith(">>>"):
                sentence = " ".join(ln for ln in lines if ln)
                if sentence:
                    doc.append(sentence)
    return doc


@dataclasses.dataclass(frozen=True)
class StdlibDocstrings:
    """Docstrings of the installed standard library: real English text on every machine
    with Python, so tests and smoke runs need no download. About 1.5 MB on 3.11."""

    max_chars: int | None = None
    root: str | None = None  # default: sysconfig.get_paths()["stdlib"]

    def describe(self) -> str:
        return f"stdlib docstrings ({self.root or sysconfig.get_paths()['stdlib']})"

    def identity(self) -> str:
        root = self.root or sysconfig.get_paths()["stdlib"]
        stats = [[str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns]
                 for f in stdlib_files(root)]
        return _identity("stdlib", root, stats, self.max_chars)

    def documents(self) -> list[Document]:
        docs: list[Document] = []
        total = 0
        for f in stdlib_files(self.root):
            doc = docstring_document(f)
            if doc:
                docs.append(doc)
                total += sum(len(s) for s in doc)
                if self.max_chars is not None and total >= self.max_chars:
                    break
        return _nonempty(docs, self.describe())


# --------------------------------------------------------------------------------------
# Spec parsing
# --------------------------------------------------------------------------------------


class Corpus(Protocol):
    """What the pipeline needs from a corpus."""

    def describe(self) -> str: ...  # for logs and error messages

    def identity(self) -> str: ...  # cache key part: changes when the text may have

    def documents(self) -> list[Document]: ...  # raises CorpusError when empty


def parse_corpus_spec(spec: str | Sequence[str] | None, max_chars: int | None = None,
                      text_column: str = "text") -> Corpus:
    """None / "stdlib" -> StdlibDocstrings; "hf:NAME[:CONFIG[:SPLIT[:COLUMN]]]" ->
    HubDataset (COLUMN defaults to `text_column`); otherwise comma-separated files,
    directories and globs -> TextFiles."""
    if spec is None or (isinstance(spec, str) and spec.strip() in ("", "stdlib")):
        return StdlibDocstrings(max_chars=max_chars)
    if isinstance(spec, str) and spec.startswith("hf:"):
        parts = spec[3:].split(":")
        if not parts[0] or len(parts) > 4:
            raise CorpusError(f"corpus: bad hub spec {spec!r}, "
                              "expected hf:NAME[:CONFIG[:SPLIT[:COLUMN]]]")
        parts += [""] * (4 - len(parts))
        return HubDataset(parts[0], parts[1] or None, parts[2] or "train",
                          parts[3] or text_column, max_chars)
    paths = tuple(_split_spec(spec))
    if not paths:
        raise CorpusError(f"corpus: empty path list {spec!r}")
    return TextFiles(paths, max_chars)


def _identity(*parts: Any) -> str:
    blob = json.dumps([READER_VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _nonempty(docs: list[Document], where: str) -> list[Document]:
    if not any(any(s.strip() for s in d) for d in docs):
        raise CorpusError(f"corpus: no text found in {where}")
    return docs


def iter_sentences(documents: Iterable[Document]) -> Iterator[str]:
    """All sentences of all documents, in order (tokenizer training input)."""
    for doc in documents:
        yield from doc
