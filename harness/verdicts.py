"""A verdict's words, defined once: the outcomes of a matrix cell (SPEC.md,
"Outcomes"), how a test ends as one of them other than pass or FAIL (its skip
reason), and the keys of the test properties the suite, the plugin and the
report pass between them.

    suite test ── pytest.skip(not_applicable_reason(why)) ──┐
       │          pytest.skip(blocked_reason(clause, why)) ─┤
       └── user_properties: (Prop.NOTE, ...), (Prop.LEAK, LEAK_CLAUSE) ...
                                                             ▼
    plugin (pytest_plugin/outcomes.py): read_skip_reason, Prop ──► Outcome per cell
                                                             ▼
    report: terminal, JSON, Markdown, HTML, diff ("blocked by C4": blocked_by)

Outcomes are strings in every report (a JSON report reads them back as
written): an ``Outcome`` is a ``str``, equal to its text, and a blocked
cell's outcome is the text ``blocked_by(clause)`` makes, read back with
``blocker_of``. No import but the standard library's.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

__all__ = [
    "BLOCKED",
    "LEAK_CLAUSE",
    "OUTCOMES",
    "Outcome",
    "Prop",
    "blocked_by",
    "blocked_reason",
    "blocker_of",
    "is_outcome",
    "not_applicable_reason",
    "read_skip_reason",
]


class Outcome(str, Enum):
    """A cell's outcome, but "blocked by Cn" (``blocked_by``): equal to its text,
    and formatted as it (``enum.StrEnum`` is Python 3.11's; harness runs on 3.10)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    PASS = "pass"
    FAIL = "FAIL"
    DECLARED = "declared"
    NOT_APPLICABLE = "not applicable"
    NOT_RUN = "not run"


#: The start of a blocked cell's outcome: "blocked by C4".
BLOCKED: Final = "blocked by "
#: The outcomes of SPEC.md, "Outcomes" ("blocked by Cn" stands for every Cn).
OUTCOMES: Final = (
    Outcome.PASS,
    Outcome.FAIL,
    Outcome.DECLARED,
    Outcome.NOT_APPLICABLE,
    "blocked by Cn",
    Outcome.NOT_RUN,
)


def blocked_by(clause: str) -> str:
    """The outcome of a cell blocked by ``clause``: "blocked by C4"."""
    return BLOCKED + clause


def blocker_of(outcome: str) -> str | None:
    """The clause a blocked outcome names ("blocked by C4" -> "C4"); None for any other outcome."""
    clause = outcome[len(BLOCKED) :] if outcome.startswith(BLOCKED) else ""
    return clause or None


def is_outcome(text: str) -> bool:
    """Whether ``text`` is an outcome a report may hold (a member, or "blocked by" a clause)."""
    return text in Outcome._value2member_map_ or blocker_of(text) is not None


# ---- how a test ends as not applicable or blocked: pytest.skip with these reasons

_NOT_APPLICABLE_REASON: Final = "[not applicable]"
_BLOCKED_REASON: Final = "[blocked by "


def not_applicable_reason(why: str) -> str:
    """The skip reason of a test with nothing to check: "[not applicable] why"."""
    return f"{_NOT_APPLICABLE_REASON} {why}"


def blocked_reason(clause: str, why: str) -> str:
    """The skip reason of a test a failing prerequisite ``clause`` stops: "[blocked by C4] why"."""
    return f"{_BLOCKED_REASON}{clause}] {why}"


def read_skip_reason(reason: str) -> tuple[str, str] | None:
    """The outcome and its note that a skip reason says (``not_applicable_reason``,
    ``blocked_reason``); None for a plain skip."""
    if reason.startswith(_NOT_APPLICABLE_REASON):
        return Outcome.NOT_APPLICABLE, reason.removeprefix(_NOT_APPLICABLE_REASON).strip()
    if reason.startswith(_BLOCKED_REASON):
        clause, _, why = reason.removeprefix(_BLOCKED_REASON).partition("]")
        return blocked_by(clause), why.strip()
    return None


# ---- the test properties (item.user_properties) the plugin reads


class Prop:
    """The keys of a test's ``user_properties`` the harness writes and reads."""

    #: Set by the plugin on every test of a variant: what the report files it under.
    CLAUSES: Final = "harness_clauses"
    BACKEND: Final = "harness_backend"
    COLUMN: Final = "harness_column"
    TEST: Final = "harness_test"
    VARIANT: Final = "harness_variant"
    #: A note for the cell (any number of them): a stretched bound, what a test could not look at.
    NOTE: Final = "harness_note"
    #: The backend declares the test's clause unsupported: why.
    DECLARED: Final = "harness_declared"
    #: A leak found after the test, with the clause it breaks (``LEAK_CLAUSE``).
    LEAK: Final = "harness_leak"
    #: What leaked, and what the backend's first start left for good (JSON).
    LEAKED: Final = "harness_leaked"
    RESIDUE: Final = "harness_residue"
    #: The backend's factory failed for the test's variant: how.
    FACTORY_FAILED: Final = "harness_factory_failed"
    #: A known leak met (its list entry's reason and what was found), and where it was listed.
    KNOWN_LEAK: Final = "harness_known_leak"
    KNOWN_LEAK_WHERE: Final = "harness_known_leak_where"
    #: What the test's processes left and was removed (JSON), and how shared memory was seen.
    REMOVED: Final = "harness_removed"
    SHM: Final = "harness_shm"
    #: The machine's load per CPU when the test ended, and its CPU by phase (JSON).
    LOAD: Final = "harness_load"
    CPU: Final = "harness_cpu"


#: The clause a leak found after a test is reported under.
LEAK_CLAUSE: Final = "C9"
