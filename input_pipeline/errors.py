"""Exceptions for bad input data: one line that names the file, path or field."""

from __future__ import annotations


class InputPipelineError(ValueError):
    """Base class: bad data or arguments handed to the input pipeline."""


class CorpusError(InputPipelineError):
    """A corpus that cannot be read or holds no text, e.g. 'corpus: no text found in /x/*.txt'."""


class TokenizerError(InputPipelineError):
    """A tokenizer file that is missing, unreadable or lacks a BERT special token."""


class CacheError(InputPipelineError):
    """The data cache cannot be written, e.g. 'cache: cannot write /c/x.bin: No space left'."""
