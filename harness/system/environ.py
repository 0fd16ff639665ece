"""Setting environment variables for a while and putting them back: a backend
that passes ``ExecutorConfig.env`` to workers started from this process, a
backend's session environment, vLLM's settings while it starts its workers."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

__all__ = ["environ", "set_environ"]


def set_environ(values: Mapping[str, str | None]) -> dict[str, str | None]:
    """Set (or, for ``None``, remove) variables; returns what they were, for putting back."""
    before = {key: os.environ.get(key) for key in values}
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    return before


@contextlib.contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in os.environ inside the block, what was there before after it."""
    before = set_environ(values)
    try:
        yield
    finally:
        set_environ(before)
