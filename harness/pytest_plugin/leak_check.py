"""The leak check after a test's executor is shut down, as a verdict.

What the executor's processes, threads, shared memory and sockets left is a
C9 finding, reported under C9 with the test's name (descriptors are C10's to
judge). What a backend's first start leaves for good (a library's monitor
thread, a runtime connection) is told apart from a leak the way C10 does it: a
second executor, started and shut down after the first, must leave nothing
more. What was proven once for a variant is remembered for its later tests
(``residue``), and a leak a known-failures list names fails C9 without failing
the run (``expected``).

``judge_leaks`` returns the verdict, and the ``executor`` fixture acts on it:
the properties go on the test, and a leak fails it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.pytest_plugin import residue as _residue
from harness.pytest_plugin.expected import Expected, ExpectedFailures
from harness.system import leaks
from harness.verdicts import LEAK_CLAUSE, Prop

__all__ = ["LeakVerdict", "judge_leaks"]


@dataclass(frozen=True)
class LeakVerdict:
    #: To add to the test's user_properties: notes, what a variant's later tests may reuse, a known leak.
    properties: list[tuple[str, str]] = field(default_factory=list)
    #: What leaked: the test fails with it, under LEAK_CLAUSE (none: it passes).
    leaked: list[str] = field(default_factory=list)


def judge_leaks(
    before: Any,
    start_again: Callable[[], None],
    variant_id: str,
    listed: tuple[ExpectedFailures, Expected] | None,
) -> LeakVerdict:
    """What the executor left since ``before`` (``leaks.baseline()``), judged:
    ``start_again`` starts and shuts down a second executor of the same config
    where what was left may be the backend's for good; ``listed`` is the test's
    known leak, where a list names one."""
    seen: dict[str, Any] = {}

    def known_residue() -> bool:
        seen["residue"] = _residue.residue_since(before)
        seen["proven_by"] = _residue.proven_for(variant_id, seen["residue"])
        return seen["proven_by"] is not None

    def known_leak() -> bool:
        seen["leaked_as_in"] = _residue.proven_for(variant_id, seen.get("residue"), _residue.LEAKED)
        return seen["leaked_as_in"] is not None

    def second_start() -> None:
        seen["second_start"] = leaks.snapshot()
        start_again()

    properties: list[tuple[str, str]] = []
    problems, again = leaks.lasting_leaks(before, second_start, known_residue=known_residue, known_leak=known_leak)
    if again and "second_start" in seen:
        # What this second start left again, every start leaves: the run's later
        # tests of this variant that leave no more skip their second start.
        left_again = _residue.residue_since(seen["second_start"])
        if left_again is not None:
            properties.append((Prop.LEAKED, left_again.to_json()))
    elif again:
        again = [f"{p} (as the second start after {seen['leaked_as_in']} showed)" for p in again]
    if problems and not again:
        proof = seen.get("proven_by")
        if proof is None and seen.get("residue") is not None:
            # Proven here: the run's later tests of this variant may reuse it (harness.pytest_plugin.residue).
            properties.append((Prop.RESIDUE, seen["residue"].to_json()))
        how = f", as a second start after {proof} showed" if proof else ""
        properties.append(
            (Prop.NOTE, f"left for good by the backend's first start (not a leak{how}): " + "; ".join(problems))
        )
        return LeakVerdict(properties)
    if again and listed is not None:
        known, entry = listed
        properties += [
            (Prop.KNOWN_LEAK, f"{known.reason(entry)}; found: {'; '.join(again)}"),
            (Prop.KNOWN_LEAK_WHERE, entry.where),
        ]
        return LeakVerdict(properties)
    if again:
        properties.append((Prop.LEAK, LEAK_CLAUSE))
        return LeakVerdict(properties, list(again))
    return LeakVerdict(properties)
