"""What a backend's first start in a process leaves for good: proven once a run, then reused.

After each test the plugin's leak check tells what a backend's first start
leaves for good (a library's monitor thread, a runtime's semaphores) from a
leak by starting and stopping a second executor, which must add nothing
(``leaks.lasting_leaks``). A backend that always leaves such things pays a
second start per test: for vLLM's executors on CPUs, about 25 s of CPU each.
So once a second start has shown a set of leftovers to be the process's, a
later test of the same variant whose leftovers are no more than that set skips
it. Leftovers are compared by kind, counted: the names of threads, shared-memory
segments, named semaphores and entries of the temporary folder, with their
random parts as ``*``. Processes or listening sockets left are never matched:
they always get the second start::

    test A's process: leftovers L, a second start adds nothing ─► A's report carries residue(L)
    the run's process: keeps it under A's variant ─► the tests forked after it inherit it
    test B's process: leftovers M within residue(L)? ─ yes ─► "left for good (as after A)"
                                                     └ no ──► a second start, as before

The other way round holds too: where a second start left things again (every
start leaves them: a leak, vLLM's IPC socket files), a later test whose
leftovers are all of the kinds that second start left (however many) is judged
a leak without a second start of its own ("as the second start after A showed").

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

__all__ = ["LEAKED", "PROVEN", "Residue", "proven_for", "remember", "residue_since", "shape"]

#: Runs of letters and digits that hold a digit: counters, hex ids, random suffixes.
_VARYING = re.compile(r"[0-9A-Za-z]*[0-9][0-9A-Za-z]*")
#: A UUID, whole: one of its groups may happen to hold no digit.
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def shape(name: str) -> str:
    """``name`` with the parts that vary between starts as ``*``:
    ``sem.mp-zeal5g28`` -> ``sem.mp-*``, ``Thread-12`` -> ``Thread-*``,
    ``ipc-6f1c…-…`` (a UUID) -> ``ipc-*``."""
    return _VARYING.sub("*", _UUID.sub("*", name))


@dataclass(frozen=True)
class Residue:
    """Leftovers by kind: the shapes of the names of threads, shared-memory
    segments, named semaphores and entries of the temporary folder, with repeats."""

    threads: tuple[str, ...]
    segments: tuple[str, ...]
    semaphores: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    def _kinds(self) -> tuple[tuple[str, ...], ...]:
        return self.threads, self.segments, self.semaphores, self.files

    def covers(self, other: Residue) -> bool:
        """Whether ``other`` holds nothing this does not, counting repeats."""
        return all(Counter(theirs) <= Counter(ours) for ours, theirs in zip(self._kinds(), other._kinds(), strict=True))

    def has_kinds_of(self, other: Residue) -> bool:
        """Whether every kind ``other`` holds is one this holds, however many of
        it: what a second start left again is a leak of that kind, whatever the count."""
        return all(set(theirs) <= set(ours) for ours, theirs in zip(self._kinds(), other._kinds(), strict=True))

    def to_json(self) -> str:
        return json.dumps(
            {"threads": self.threads, "segments": self.segments, "semaphores": self.semaphores, "files": self.files}
        )

    @classmethod
    def from_json(cls, text: str) -> Residue:
        data = json.loads(text)
        return cls(*(tuple(data.get(k, ())) for k in ("threads", "segments", "semaphores", "files")))


def residue_since(before: leaks.Snapshot) -> Residue | None:
    """What this process holds now that it did not at ``before``, by kind; None
    where a process or a listening socket is among it (never matched)."""
    now = leaks.snapshot()
    if now.children - before.children or now.listening - before.listening:
        return None
    names = leaks.new_thread_names(before, now)
    segments = leaks.new_segments(before, now)
    return Residue(
        *(
            tuple(sorted(map(shape, new)))
            for new in (names, segments, leaks.new_named_semaphores(before, now), now.temp - before.temp)
        )
    )


#: variant id -> (residue, the test whose second start proved it), filled by the
#: run's process from reports and inherited by the test processes it forks.
PROVEN: dict[str, list[tuple[Residue, str]]] = {}
#: The same for leaks: what a second start left again (so every start leaves it).
LEAKED: dict[str, list[tuple[Residue, str]]] = {}


def remember(variant: str, residue_json: str, test: str, proofs: dict[str, list[tuple[Residue, str]]] = PROVEN) -> None:
    """Keep a residue a test's second start proved (once per distinct residue);
    with ``proofs=LEAKED``, what a second start left again."""
    residue = Residue.from_json(residue_json)
    known = proofs.setdefault(variant, [])
    if all(r != residue for r, _ in known):
        known.append((residue, test))


def proven_for(
    variant: str, residue: Residue | None, proofs: dict[str, list[tuple[Residue, str]]] = PROVEN
) -> str | None:
    """The test whose second start proved leftovers that cover ``residue``, if any
    (with ``proofs=LEAKED``: a second start that left leftovers of its kinds again)."""
    if residue is None:
        return None
    fits = Residue.has_kinds_of if proofs is LEAKED else Residue.covers
    return next((test for r, test in proofs.get(variant, []) if fits(r, residue)), None)
