"""Loading from the Hugging Face hub without a wall of retry warnings.

huggingface_hub logs every retry of an unreachable hub at WARNING through its own
handler, and absl's handler prints the same record again: ten lines for one failure.
quiet_retries() keeps them out of the console, and unreachable_hint() turns the one
error that follows into a line that says what to do offline."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

# Names of the errors (and words in their messages) of a hub that cannot be reached.
_UNREACHABLE = ("ConnectionError", "LocalEntryNotFoundError", "OfflineModeIsEnabled",
                "Couldn't reach", "Connection refused", "Name or service not known",
                "Max retries exceeded", "Temporary failure in name resolution")


@contextlib.contextmanager
def quiet_retries() -> Iterator[None]:
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def unreachable_hint(error: BaseException, local_option: str) -> str:
    """'' unless `error` says the hub could not be reached; then what to do instead:
    `local_option` (e.g. "--config.data.corpus=FILES_OR_DIR"), or the cache offline."""
    text = f"{type(error).__name__} {error} {error.__cause__!r}"
    if not any(word in text for word in _UNREACHABLE):
        return ""
    return (f"; the hub is unreachable from here: give local data ({local_option}), or set "
            f"HF_HUB_OFFLINE=1 to read a copy already in the Hugging Face cache without "
            f"retrying")
