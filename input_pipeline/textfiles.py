"""Local UTF-8 text files read in blocks: decoding, a check that the file is text, the
layout of each file, and Project Gutenberg boilerplate.

A file is read 1 MiB at a time and split into lines (CRLF and CR become LF, a BOM is
dropped), so memory stays bounded for any file size, even one without newlines (long
lines come as pieces of at most `max_line_chars`). Undecodable bytes are replaced by
U+FFFD and counted; a block that is mostly NUL bytes or undecodable means the file is
not text (an executable, an archive, UTF-16), which is an error naming the file.

Layout (see input_pipeline.documents): a line starting with `*** START OF` within the
first HEAD_LINES lines marks a Project Gutenberg book, read as 'paragraphs' after that
line; otherwise a first non-blank line ' = Title = ' means 'wikitext', and anything else
is 'lines'. In every file a line starting with `*** END OF` ends the text.
"""

from __future__ import annotations

import codecs
import glob
import os
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from absl import logging

from input_pipeline.documents import (
    DocumentSink,
    LayoutBuilder,
    split_long_line,
    wikitext_heading_level,
)
from input_pipeline.errors import CorpusError

BLOCK_BYTES = 1 << 20
# A Gutenberg START marker is looked for only this near the top of a file (the longest
# licence headers are a few hundred lines): what precedes it is dropped, so it must be
# held back until the marker is found, and that buffer must stay small.
HEAD_LINES = 1000
# A block with more NUL bytes than this share, or more undecodable characters than
# that share, is not UTF-8 text. Latin-1 prose has a few percent undecodable bytes
# (accented letters) and is still read, with a warning; binaries are far above both.
MAX_NUL_FRACTION = 0.01
MAX_UNDECODABLE_FRACTION = 0.10

_GUTENBERG_START = re.compile(r"^\*\*\*\s*START OF", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^\ufeff*[^\S\n]*\*\*\*[^\S\n]*END OF", re.IGNORECASE | re.MULTILINE)

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


DEFAULT_ENCODING = "utf-8"


def check_encoding(encoding: str) -> str:
    """The codec's name; CorpusError naming data.encoding when Python has no such codec."""
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise CorpusError(f"corpus: data.encoding={encoding!r} is not a text encoding Python "
                          f"knows (e.g. utf-8, latin-1, cp1252)") from None


class TextFileReader:
    """Reads one file's lines in blocks; `replaced` counts undecodable byte sequences.
    `encoding`: data.encoding (UTF-8 also drops a byte-order mark)."""

    def __init__(self, path: str | os.PathLike, max_line_chars: int,
                 encoding: str = DEFAULT_ENCODING):
        self.path = Path(path)
        self.max_line_chars = max_line_chars
        self.encoding = check_encoding(encoding)
        self.replaced = 0

    def _not_text(self, details: str) -> CorpusError:
        shown = "UTF-8" if self.encoding == "utf-8" else self.encoding
        return CorpusError(f"corpus: {self.path} is not {shown} text ({details}); if it is text "
                           f"in another encoding, set data.encoding (e.g. "
                           f"--config.data.encoding=latin-1)")

    def _check_text(self, raw: bytes, decoded: str, replaced: int) -> None:
        nul = raw.count(b"\x00")
        if nul > MAX_NUL_FRACTION * len(raw) and not self.encoding.startswith("utf-16"):
            raise self._not_text(f"{nul} NUL bytes in a {len(raw)}-byte block: a binary or "
                                 f"UTF-16 file?")
        # (At least 16: a short file with a couple of Latin-1 letters is still text.)
        if replaced > max(16, MAX_UNDECODABLE_FRACTION * len(decoded)):
            raise self._not_text(f"{replaced} undecodable byte sequences in a {len(raw)}-byte "
                                 f"block")

    def _blocks(self) -> Iterator[str]:
        """Decoded text, each piece ending at a line end (except at the end of the file)."""
        codec = "utf-8-sig" if self.encoding == "utf-8" else self.encoding
        decoder = codecs.getincrementaldecoder(codec)(errors=_ERRORS)
        carry = ""
        try:
            with open(self.path, "rb") as f:
                while True:
                    raw = f.read(BLOCK_BYTES)
                    # A generator may be resumed on another thread (the tokenizer trainer
                    # pulls from its worker threads): count within this step only.
                    before = getattr(_replaced, "count", 0)
                    text = decoder.decode(raw, final=not raw)
                    bad = getattr(_replaced, "count", 0) - before
                    self.replaced += bad
                    if raw:
                        self._check_text(raw, text, bad)
                    text = carry + text
                    if not raw:
                        if text:
                            yield text
                        return
                    # Keep the unfinished last line for the next block; a final '\r' may
                    # be the first half of '\r\n'.
                    cut = max(text.rfind("\n"), text.rfind("\r", 0, len(text) - 1))
                    text, carry = text[:cut + 1], text[cut + 1:]
                    if len(carry) > self.max_line_chars:  # a very long line: emit pieces
                        *pieces, carry = split_long_line(carry, self.max_line_chars)
                        text += "\n".join(pieces) + "\n"
                    if text:
                        yield text
        except OSError as e:
            raise CorpusError(f"corpus: cannot read {self.path}: {e.strerror or e}") from e

    def line_blocks(self) -> Iterator[list[str]]:
        """Lists of lines (newline removed), up to a Gutenberg END line if there is one."""
        for text in self._blocks():
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            end = _GUTENBERG_END.search(text) if "***" in text else None
            if end is not None:
                text = text[:end.start()]
            lines = text.split("\n")
            if lines[-1] == "":
                lines.pop()
            if lines and max(map(len, lines)) > self.max_line_chars:
                lines = [p for line in lines for p in split_long_line(line, self.max_line_chars)]
            yield lines
            if end is not None:
                return

    def read_into(self, sink: DocumentSink) -> Iterator[None]:
        """Feeds the file's sentences into `sink`; yields after each block (so the caller
        can take chunks or stop), and ends the file's last document."""
        blocks = self.line_blocks()
        head: list[str] = []
        head_chars = 0
        for lines in blocks:  # HEAD_LINES lines, or a few blocks of very long lines
            head.extend(lines)
            head_chars += sum(map(len, lines))
            if len(head) >= HEAD_LINES or head_chars >= 4 * BLOCK_BYTES:
                break
        layout, head = _choose_layout(head)
        builder = LayoutBuilder(sink, layout, self.max_line_chars)
        builder.add_lines(head)
        yield
        for lines in blocks:
            builder.add_lines(lines)
            yield
        builder.end_document()
        if self.replaced:
            logging.warning("corpus: %s: %d undecodable byte sequences replaced by U+FFFD",
                            self.path, self.replaced)


def _choose_layout(head: list[str]) -> tuple[str, list[str]]:
    """(layout, the head lines to use) from a file's first lines."""
    for i, line in enumerate(head[:HEAD_LINES]):
        if "***" in line and _GUTENBERG_START.match(line.lstrip("\ufeff").lstrip()):
            return "paragraphs", head[i + 1:]  # the licence header before it is dropped
    for line in head:
        if line.strip():
            return ("wikitext" if wikitext_heading_level(line) == 1 else "lines"), head
    return "lines", head


# --------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------


def split_spec(paths: str | Sequence[str | os.PathLike]) -> list[str]:
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
    empty_globs = []
    for item in split_spec(paths):
        if any(c in item for c in "*?["):
            matches = sorted(glob.glob(item, recursive=True))
            if not matches:
                empty_globs.append(item)
            for m in matches:
                out.extend(Path(f) for f in (_files_under(m) if os.path.isdir(m) else [m]))
        elif os.path.isdir(item):
            out.extend(Path(f) for f in _files_under(item))
        elif os.path.isfile(item):
            out.append(Path(item))
        else:
            raise CorpusError(f"corpus: no such file or directory: {item}")
    if out:  # (with no file at all the caller's error says it; no warning before it)
        for item in empty_globs:
            logging.warning("corpus: glob %s matches no files", item)
    return list(dict.fromkeys(p.resolve() for p in out if p.is_file()))
