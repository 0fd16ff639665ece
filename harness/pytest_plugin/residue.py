"""What a backend's first start in a process leaves for good: proven once a run, then reused.

After each test the plugin's leak check tells what a backend's first start
leaves for good (a library's monitor thread, a runtime's semaphores) from a
leak by starting and stopping a second executor, which must add nothing
(``leaks.lasting_leaks``). A backend that always leaves such things pays a
second start per test: for vLLM's executors on CPUs, about 25 s of CPU each.
So once a second start has shown a set of leftovers to be the process's, a
later test of the same variant whose leftovers are no more than that set skips
it. Leftovers are compared by kind, counted: thread names and shared-memory
names with their random parts as ``*``. Processes or listening sockets left
are never matched: they always get the second start::

    test A's process: leftovers L, a second start adds nothing ─► A's report carries residue(L)
    the run's process: keeps it under A's variant ─► the tests forked after it inherit it
    test B's process: leftovers M within residue(L)? ─ yes ─► "left for good (as after A)"
                                                     └ no ──► a second start, as before

A second start cannot tell a leak that only the test's own scenario causes
from the process's leftovers either; what this skips is the check a clean
second start would have repeated.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass

from harness.system import leaks

__all__ = ["PROVEN", "Residue", "proven_for", "remember", "residue_since", "shape"]

#: Runs of letters and digits that hold a digit: counters, hex ids, random suffixes.
_VARYING = re.compile(r"[0-9A-Za-z]*[0-9][0-9A-Za-z]*")


def shape(name: str) -> str:
    """``name`` with the parts that vary between starts as ``*``:
    ``sem.mp-zeal5g28`` -> ``sem.mp-*``, ``Thread-12`` -> ``Thread-*``."""
    return _VARYING.sub("*", name)


@dataclass(frozen=True)
class Residue:
    """Leftovers by kind: the shapes of thread and segment names, with repeats."""

    threads: tuple[str, ...]
    segments: tuple[str, ...]

    def covers(self, other: Residue) -> bool:
        """Whether ``other`` holds nothing this does not, counting repeats."""
        return Counter(other.threads) <= Counter(self.threads) and Counter(other.segments) <= Counter(self.segments)

    def to_json(self) -> str:
        return json.dumps({"threads": list(self.threads), "segments": list(self.segments)})

    @classmethod
    def from_json(cls, text: str) -> Residue:
        data = json.loads(text)
        return cls(tuple(data["threads"]), tuple(data["segments"]))


def residue_since(before: leaks.Snapshot) -> Residue | None:
    """What this process holds now that it did not at ``before``, by kind; None
    where a process or a listening socket is among it (never matched)."""
    now = leaks.snapshot()
    if now.children - before.children or now.listening - before.listening:
        return None
    names = leaks.new_thread_names(before, now)
    segments = leaks.new_segments(before, now)
    return Residue(tuple(sorted(map(shape, names))), tuple(sorted(map(shape, segments))))


#: variant id -> (residue, the test whose second start proved it), filled by the
#: run's process from reports and inherited by the test processes it forks.
PROVEN: dict[str, list[tuple[Residue, str]]] = {}


def remember(variant: str, residue_json: str, test: str) -> None:
    """Keep a residue a test's second start proved (once per distinct residue)."""
    residue = Residue.from_json(residue_json)
    known = PROVEN.setdefault(variant, [])
    if all(r != residue for r, _ in known):
        known.append((residue, test))


def proven_for(variant: str, residue: Residue | None) -> str | None:
    """The test whose second start proved leftovers that cover ``residue``, if any."""
    if residue is None:
        return None
    return next((test for r, test in PROVEN.get(variant, []) if r.covers(residue)), None)
