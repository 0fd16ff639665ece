"""Whether a file can be written where a user asked for one: checked before a
run of minutes, not found at its end (reports, plots, chaos's JSON)."""

from __future__ import annotations

import argparse
import os

__all__ = ["check_writable", "unwritable"]


def unwritable(path: str) -> str | None:
    """Why no file can be written at ``path`` (its folder does not exist, or
    cannot be written), or None where one can."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"the folder {folder!r} does not exist"
    if not os.access(folder, os.W_OK):
        return f"the folder {folder!r} is not writable"
    return None


def check_writable(parser: argparse.ArgumentParser, option: str, path: str | None) -> None:
    """The parser's usage error for an output ``path`` given with ``option`` that cannot be written."""
    why = unwritable(path) if path else None
    if why is not None:
        parser.error(f"argument {option}: cannot write {path!r}: {why}")
