"""Corpora for MLM pretraining: local text files, Hugging Face hub datasets, and the
offline default, the docstrings of the installed Python standard library.

Every corpus streams `TextChunk`s (input_pipeline.documents): about a megabyte of
sentences at a time, each with the number of its document. Sentences of one document
are packed together, documents never share a sequence, and the held-out eval split is
drawn by document. `documents()` gathers the whole corpus into lists for tests and small
corpora; the pipeline never calls it.

Corpus spec strings (`parse_corpus_spec`):
  None or "stdlib"                 the standard library docstrings (offline, ~1.5 MB)
  "hf:NAME[:CONFIG[:SPLIT[:COLUMN]]]"  e.g. "hf:wikitext:wikitext-103-raw-v1:train"
  "synthetic:TASK[:KEY=VALUE,...]"  a generated recall task (input_pipeline/synthetic.py)
  anything else                    comma-separated files, directories and globs
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import os
import re
import sysconfig
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from absl import logging

from common import hub
from common.console import console
from input_pipeline import synthetic
from input_pipeline.documents import (
    DEFAULT_CHUNK_CHARS,
    DEFAULT_MAX_LINE_CHARS,
    Document,
    DocumentSink,
    LayoutBuilder,
    TextChunk,
    group_documents,
    split_long_line,
    wikitext_heading_level,
)
from input_pipeline.errors import CorpusError
from input_pipeline.textfiles import (
    DEFAULT_ENCODING,
    TextFileReader,
    check_encoding,
    expand_paths,
    split_spec,
)

__all__ = [
    "CONTENT_IDENTITY",
    "DEFAULT_CHUNK_CHARS", "DEFAULT_MAX_LINE_CHARS", "READER_VERSION", "Corpus", "Document",
    "HubDataset", "StdlibDocstrings", "TextChunk", "TextFiles", "dataset_chunks",
    "docstring_document", "documents_from_dataset", "expand_paths", "iter_sentences",
    "parse_corpus_spec", "read_text_file", "stdlib_files",
]

# Bump when the reader's output changes for the same input, so that caches keyed on
# the corpus identity are rebuilt. 2: streaming reader; 'lines' documents end at
# MAX_DOCUMENT_CHARS; Gutenberg START markers only near the top of a file.
READER_VERSION = 2

# Directories of the standard library whose docstrings are not prose worth learning
# from (test suites, the IDLE and turtle demos) or are not the standard library.
_STDLIB_SKIP_DIRS = frozenset({
    "__pycache__", "dist-packages", "ensurepip", "idle_test", "idlelib", "lib-dynload",
    "pydoc_data", "site-packages", "test", "tests", "turtledemo",
})


class Corpus(Protocol):
    """What the pipeline needs from a corpus."""

    def describe(self) -> str: ...  # for logs and error messages

    def identity(self) -> str: ...  # cache key part: changes when the text may have

    # Raises CorpusError when the corpus holds no text.
    def chunks(self, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> Iterator[TextChunk]: ...

    def documents(self) -> list[Document]: ...


def _identity(*parts: Any) -> str:
    blob = json.dumps([READER_VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


# Identities of local files start with this; older ones (plain hex) hashed the files'
# sizes and times instead of their bytes (kept as legacy_identity() for the resume check
# of checkpoints made before).
CONTENT_IDENTITY = "content:"


def _content_identity(*parts: Any) -> str:
    return CONTENT_IDENTITY + _identity(*parts)


def _file_digest(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as e:  # as the reader says it (the identity reads first)
        raise CorpusError(f"corpus: cannot read {path}: {e.strerror or e}") from e


def _finish(sink: DocumentSink, where: str, chunk_chars: int) -> Iterator[TextChunk]:
    """The last chunks; CorpusError if the whole corpus gave no sentence."""
    if sink.num_docs == 0:
        raise CorpusError(f"corpus: no text found in {where}")
    while sink.sentences:
        yield sink.take(chunk_chars)


def _over_budget(sink: DocumentSink, max_chars: int | None) -> bool:
    if max_chars is None or sink.total_chars < max_chars:
        return False
    sink.cut_at(max_chars)
    return True


# --------------------------------------------------------------------------------------
# Local text files
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TextFiles:
    """Local text files (UTF-8 unless `encoding`); `paths` as for `expand_paths`."""

    paths: tuple[str, ...]
    max_chars: int | None = None  # stop reading after about this many characters
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS
    encoding: str = DEFAULT_ENCODING  # data.encoding

    def describe(self) -> str:
        return ",".join(self.paths)

    @functools.cached_property
    def files(self) -> list[Path]:
        return expand_paths(self.paths)

    def identity(self) -> str:
        """The files' bytes in reading order, not their names or times: a copy on another
        disk or in another directory is the same corpus (its cache and its runs' resumes
        hold), a file edited in place with its size and time kept is not. Hashing reads
        every byte once per start (a resume's check passes its identity on as the cache
        key), every file even when max_chars stops reading early: about 0.1 s per 35 MB
        on one core. Not cached by stat within a process: an edit that keeps size
        and time must change it there too."""
        digests = [_file_digest(f) for f in self.files]
        return _content_identity("files", digests, self.max_chars, self.max_line_chars,
                                 *self._encoding_part())

    def legacy_identity(self) -> str:
        """The identity checkpoints saved before content hashing: paths, sizes, times."""
        stats = []
        for f in self.files:
            st = f.stat()
            stats.append([str(f), st.st_size, st.st_mtime_ns])
        return _identity("files", stats, self.max_chars, self.max_line_chars,
                         *self._encoding_part())

    def _encoding_part(self) -> list[str]:
        """The encoding decides the text (a UTF-8 identity stays as it was before the
        field existed)."""
        codec = check_encoding(self.encoding)
        return [] if codec == "utf-8" else [codec]

    def chunks(self, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> Iterator[TextChunk]:
        sink = DocumentSink()
        total_replaced = 0
        for f in self.files:
            reader = TextFileReader(f, self.max_line_chars, self.encoding)
            stop = False
            for _ in reader.read_into(sink):
                if _over_budget(sink, self.max_chars):
                    stop = True
                    break
                yield from sink.chunks(chunk_chars)
            sink.end_document()  # documents never span files
            total_replaced += reader.replaced
            if stop:
                break
        if total_replaced:
            logging.warning("corpus: %d undecodable byte sequences replaced in total",
                            total_replaced)
        yield from _finish(sink, self.describe(), chunk_chars)

    def documents(self) -> list[Document]:
        return list(group_documents(self.chunks()))


def read_text_file(
    path: str | os.PathLike, max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    max_chars: int | None = None,
) -> tuple[list[Document], int]:
    """Reads one UTF-8 text file into documents; returns (documents, replaced).

    `replaced` counts undecodable byte sequences, each replaced by U+FFFD (the file is
    still used: a few bad bytes in a 30 MB book should not stop a run; a file that is
    mostly undecodable is a CorpusError). Project Gutenberg boilerplate is dropped
    (input_pipeline.textfiles).
    """
    sink = DocumentSink()
    reader = TextFileReader(path, max_line_chars)
    for _ in reader.read_into(sink):
        if _over_budget(sink, max_chars):
            break
    return list(group_documents([sink.take()])), reader.replaced


# --------------------------------------------------------------------------------------
# Hugging Face datasets
# --------------------------------------------------------------------------------------


def dataset_chunks(
    dataset: Any, text_column: str = "text", *, rows_are_documents: bool | None = None,
    max_chars: int | None = None, max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    name: str = "dataset", chunk_chars: int = DEFAULT_CHUNK_CHARS,
) -> Iterator[TextChunk]:
    """Streams a `datasets.Dataset` with a text column as chunks, 1000 rows at a time.

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
    sink = DocumentSink()
    builder: LayoutBuilder | None = None
    for batch in dataset.iter(batch_size=1000):
        for row in batch[text_column]:
            lines = (row or "").split("\n")
            if builder is None:  # layout decided by the first non-blank line
                first = next((line for line in lines if line.strip()), None)
                if first is None:
                    continue
                wiki = wikitext_heading_level(first) == 1 and not rows_are_documents
                builder = LayoutBuilder(sink, "wikitext" if wiki else "lines", max_line_chars)
            if rows_are_documents:  # blank lines inside a row separate paragraphs
                lines = [line for line in lines if line.strip()]
            if max(map(len, lines), default=0) > max_line_chars:
                lines = [p for line in lines for p in split_long_line(line, max_line_chars)]
            builder.add_lines(lines)
            if rows_are_documents:
                builder.end_document()
            if _over_budget(sink, max_chars):
                yield from _finish(sink, name, chunk_chars)
                return
        yield from sink.chunks(chunk_chars)
    if builder is not None:
        builder.end_document()
    yield from _finish(sink, name, chunk_chars)


def documents_from_dataset(dataset: Any, text_column: str = "text", **kwargs: Any,
                           ) -> list[Document]:
    """All documents of a dataset as lists (see `dataset_chunks` for the arguments)."""
    return list(group_documents(dataset_chunks(dataset, text_column, **kwargs)))


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

        console(f"data: loading {self.describe()} from the Hugging Face hub or its cache "
                f"(an unreachable hub is retried for about 25 s)...")
        try:
            # Arrow files are memory-mapped: iterating them does not load the dataset.
            with hub.quiet_retries():
                return datasets.load_dataset(self.name, self.config, split=self.split)
        except Exception as e:  # network, unknown name or config, bad split
            hint = hub.unreachable_hint(e, "--config.data.corpus=FILES_OR_DIR")
            raise CorpusError(f"corpus: cannot load {self.describe()}: "
                              f"{type(e).__name__}: {e}{hint}") from e

    def identity(self) -> str:
        # The fingerprint changes when the dataset's files do; loading an already
        # downloaded dataset is cheap compared with tokenizing it.
        fingerprint = getattr(self.dataset, "_fingerprint", None)
        return _identity("hf", self.describe(), fingerprint, self.max_chars)

    def chunks(self, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> Iterator[TextChunk]:
        return dataset_chunks(self.dataset, self.text_column, max_chars=self.max_chars,
                              name=self.describe(), chunk_chars=chunk_chars)

    def documents(self) -> list[Document]:
        return list(group_documents(self.chunks()))


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
        """The files' names under the root and their bytes (the names order them), as
        TextFiles.identity: a reinstalled, unchanged Python is the same corpus."""
        root = self.root or sysconfig.get_paths()["stdlib"]
        digests = [[str(f.relative_to(root)), _file_digest(f)] for f in stdlib_files(root)]
        return _content_identity("stdlib", digests, self.max_chars)

    def legacy_identity(self) -> str:
        """The identity checkpoints saved before content hashing: paths, sizes, times."""
        root = self.root or sysconfig.get_paths()["stdlib"]
        stats = [[str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns]
                 for f in stdlib_files(root)]
        return _identity("stdlib", root, stats, self.max_chars)

    def chunks(self, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> Iterator[TextChunk]:
        sink = DocumentSink()
        for f in stdlib_files(self.root):
            for sentence in docstring_document(f):  # one module is one document
                sink.add(sentence)
            sink.end_document()
            if self.max_chars is not None and sink.total_chars >= self.max_chars:
                break  # whole modules: the budget is checked between documents
            yield from sink.chunks(chunk_chars)
        yield from _finish(sink, self.describe(), chunk_chars)

    def documents(self) -> list[Document]:
        return list(group_documents(self.chunks()))


# --------------------------------------------------------------------------------------
# Spec parsing
# --------------------------------------------------------------------------------------


def parse_corpus_spec(spec: str | Sequence[str] | None, max_chars: int | None = None,
                      text_column: str = "text", encoding: str = DEFAULT_ENCODING) -> Corpus:
    """None / "stdlib" -> StdlibDocstrings; "hf:NAME[:CONFIG[:SPLIT[:COLUMN]]]" ->
    HubDataset (COLUMN defaults to `text_column`); "synthetic:TASK[:KEY=VALUE,...]" ->
    synthetic.SyntheticCorpus; otherwise comma-separated files, directories and globs ->
    TextFiles."""
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
    if isinstance(spec, str) and spec.startswith(synthetic.PREFIX):
        return synthetic.parse_spec(spec)
    paths = tuple(split_spec(spec))
    if not paths:
        raise CorpusError(f"corpus: empty path list {spec!r}")
    return TextFiles(paths, max_chars, encoding=encoding)


def iter_sentences(documents: Iterable[Document]) -> Iterator[str]:
    """All sentences of all documents, in order."""
    for doc in documents:
        yield from doc
