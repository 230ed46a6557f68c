"""The error types that packages low in the import graph raise and every layer above
catches (training/cli.py turns them into one `error:` line). Standard library only."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value or combination that cannot work; the message names the field."""


class CheckpointError(ValueError):
    """A checkpoint that is missing, damaged or does not fit; the message names the path."""
