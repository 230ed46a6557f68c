"""Lines of text -> sentences numbered by document, collected into bounded chunks.

A corpus is streamed as `TextChunk`s: a list of sentences and, for each sentence, the
number of its document (0, 1, 2, ... over the whole corpus, never decreasing). A
document may continue into the next chunk, so no document, however long, has to be
held in memory; consumers (tokenizer training, packing) work chunk by chunk.

How lines become sentences and documents (one `LayoutBuilder` per file or stream):
  lines       BERT's create_pretraining_data format: one sentence per non-blank line,
              a blank line ends the document, and so does reaching MAX_DOCUMENT_CHARS
              (a file without blank lines would otherwise be a single document, and a
              held-out split by document would be empty).
  paragraphs  Project Gutenberg books: prose is hard-wrapped, so the lines of a
              paragraph are joined into one sentence and the whole book is one document
              (a leading 'Produced by ...' credit and 'End of the Project Gutenberg ...'
              lines are dropped).
  wikitext    WikiText raw files: a top-level heading (' = Title = ') starts a new
              article (document); headings themselves are dropped.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator

import numpy as np

Document = list[str]

# Lines longer than this (characters) are cut into pieces at whitespace. A corpus
# file with no newlines at all would otherwise become one gigantic "sentence".
DEFAULT_MAX_LINE_CHARS = 100_000
# About this much text per chunk: big enough that per-chunk costs (a numpy call, one
# batch for the tokenizer) vanish, small enough that a chunk's Python objects (about
# 60 bytes per word) stay in the tens of MB.
DEFAULT_CHUNK_CHARS = 1 << 20
# 'lines' layout: a document ends once it holds this many characters (at the end of
# the sentence that reaches it). Wikipedia articles are rarely longer; a one-sentence-
# per-line file is cut into documents of about 100 KB (~25k tokens).
MAX_DOCUMENT_CHARS = 100_000

LAYOUTS = ("lines", "paragraphs", "wikitext")

# Credits that sit inside the START/END markers of most Project Gutenberg books.
_GUTENBERG_PRODUCED_BY = re.compile(r"^produced by\b", re.IGNORECASE)
_GUTENBERG_END_LINE = re.compile(r"^end of (the )?project gutenberg", re.IGNORECASE)


@dataclasses.dataclass
class TextChunk:
    """Consecutive sentences of a corpus with the number of each one's document."""

    sentences: list[str]
    doc_ids: list[int]  # same length; non-decreasing, numbered over the whole corpus

    def __len__(self) -> int:
        return len(self.sentences)


class DocumentSink:
    """Receives sentences and document ends; hands them out as TextChunks.

    Document numbers are given when a document's first sentence arrives, so empty
    documents (two blank lines, a file of headings) take no number.
    """

    def __init__(self) -> None:
        self.sentences: list[str] = []
        self.doc_ids: list[int] = []
        self.chars = 0  # characters in the chunk being collected
        self.taken_chars = 0  # characters in chunks already handed out
        self.num_docs = 0  # documents begun so far
        self.doc_chars = 0  # characters in the open document
        self._open = False

    @property
    def total_chars(self) -> int:
        return self.taken_chars + self.chars

    def add(self, sentence: str) -> None:
        if not self._open:
            self._open = True
            self.num_docs += 1
            self.doc_chars = 0
        self.sentences.append(sentence)
        self.doc_ids.append(self.num_docs - 1)
        self.chars += len(sentence)
        self.doc_chars += len(sentence)

    @property
    def document_open(self) -> bool:
        return self._open

    def end_document(self) -> None:
        self._open = False

    def take(self, max_chars: int | None = None) -> TextChunk:
        """The sentences collected so far, or only those up to the one that brings the
        chunk to max_chars (the rest stay for the next chunk)."""
        n, chars = len(self.sentences), self.chars
        if max_chars is not None and chars > max_chars:
            ends = np.cumsum([len(sentence) for sentence in self.sentences])
            n = int(np.searchsorted(ends, max_chars)) + 1
            chars = int(ends[n - 1])
        chunk = TextChunk(self.sentences[:n], self.doc_ids[:n])
        del self.sentences[:n], self.doc_ids[:n]
        self.taken_chars += chars
        self.chars -= chars
        return chunk

    def chunks(self, chunk_chars: int) -> Iterator[TextChunk]:
        """Full chunks of about chunk_chars (called after each block of input)."""
        while self.chars >= chunk_chars:
            yield self.take(chunk_chars)

    def cut_at(self, max_chars: int) -> None:
        """Drops what follows the sentence that brings the total to max_chars."""
        running = self.taken_chars
        for i, sentence in enumerate(self.sentences):
            running += len(sentence)
            if running >= max_chars:
                del self.sentences[i + 1:], self.doc_ids[i + 1:]
                self.chars = running - self.taken_chars
                return


def wikitext_heading_level(line: str) -> int:
    """1 for ' = Title = ', 2 for ' = = Section = = ', ...; 0 if not a heading."""
    s = line.strip()
    if len(s) < 5 or not (s.startswith("= ") and s.endswith(" =")):
        return 0
    level = 0
    while s.startswith("= "):
        level, s = level + 1, s[2:]
    return level


def split_long_line(line: str, max_line_chars: int) -> list[str]:
    """Cuts a line into pieces of at most max_line_chars, at whitespace where there is some."""
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


class LayoutBuilder:
    """Feeds lines (newline removed) of one file or stream into a sink under one layout."""

    def __init__(self, sink: DocumentSink, layout: str = "lines",
                 max_sentence_chars: int = DEFAULT_MAX_LINE_CHARS,
                 max_document_chars: int = MAX_DOCUMENT_CHARS):
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r} not in {LAYOUTS}")
        self.sink = sink
        self.layout = layout
        self.max_sentence_chars = max_sentence_chars
        self.max_document_chars = max_document_chars
        self._para: list[str] = []
        self._para_chars = 0

    def add_lines(self, lines: Iterable[str]) -> None:
        # One loop per layout: this runs once per line of the corpus.
        if self.layout == "lines":
            self._add_lines(lines)
        elif self.layout == "paragraphs":
            self._add_paragraph_lines(lines)
        else:
            self._add_wikitext_lines(lines)

    def end_document(self) -> None:
        self._end_paragraph()
        self.sink.end_document()

    def _add_lines(self, lines: Iterable[str]) -> None:
        sink, limit = self.sink, self.max_document_chars
        for line in lines:
            s = line.strip()
            if s:
                sink.add(s)
                if sink.doc_chars >= limit:
                    sink.end_document()
            else:
                sink.end_document()

    def _add_paragraph_lines(self, lines: Iterable[str]) -> None:
        para = self._para
        for line in lines:
            s = line.strip()
            if not s:
                if para:
                    self._end_paragraph()
                    para = self._para
                continue
            para.append(s)
            self._para_chars += len(s) + 1
            if self._para_chars > self.max_sentence_chars:  # one huge "paragraph"
                self._end_paragraph()
                para = self._para

    def _end_paragraph(self) -> None:
        if not self._para:
            return
        sentence = " ".join(self._para)
        self._para, self._para_chars = [], 0
        if not self.sink.document_open and _GUTENBERG_PRODUCED_BY.match(sentence):
            return  # the credits line that opens most books
        if _GUTENBERG_END_LINE.match(sentence):
            return
        self.sink.add(sentence)

    def _add_wikitext_lines(self, lines: Iterable[str]) -> None:
        sink = self.sink
        for line in lines:
            s = line.strip()
            if s.startswith("= ") and s.endswith(" ="):
                if wikitext_heading_level(s) == 1:
                    sink.end_document()
                if wikitext_heading_level(s):
                    continue
            if s:
                sink.add(s)


def group_documents(chunks: Iterable[TextChunk]) -> Iterator[Document]:
    """Documents (lists of sentences) from a chunk stream: for tests and small corpora."""
    doc: Document = []
    current = -1
    for chunk in chunks:
        for sentence, d in zip(chunk.sentences, chunk.doc_ids, strict=True):
            if d != current:
                if doc:
                    yield doc
                doc, current = [], d
            doc.append(sentence)
    if doc:
        yield doc
