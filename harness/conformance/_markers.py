"""Marker files a worker leaves so the caller knows a call reached a point.

A worker leaves its marker in its own machine's files; a rank on another node
has a ``/tmp`` of its own, where the caller's folder does not exist. So the
worker makes the folder where it is missing (``leave``), and the caller looks
for the marker in its own files and in each rank's, through
``/proc/<pid>/root`` (the same file for a rank on the caller's machine)::

    rank on node 1: /tmp/…/markers/rank-3 (its /tmp) ◄── caller: /proc/<rank 3's pid>/root/tmp/…/markers/rank-3
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["leave", "names_in", "seen"]


def leave(path: str | Path) -> None:
    """In a worker: create the file ``path`` (and its folder, where this machine has none)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).touch()


def _roots(pids: Iterable[int]) -> list[str]:
    return ["", *(f"/proc/{pid}/root" for pid in pids)]


def seen(path: str | Path, pids: Iterable[int]) -> bool:
    """Whether ``path`` exists here or in the files of any of the processes ``pids``."""
    return any(os.path.exists(f"{root}{os.path.abspath(path)}") for root in _roots(pids))


def names_in(folder: str | Path, pids: Iterable[int]) -> set[str]:
    """The entries of ``folder`` here and in the files of the processes ``pids``."""
    found: set[str] = set()
    for root in _roots(pids):
        with contextlib.suppress(OSError):
            found.update(os.listdir(f"{root}{os.path.abspath(folder)}"))
    return found
