"""Outcomes: what each test report means for the clauses it checks.

Every backend test carries, from collection on, the clauses it checks and the
matrix column it belongs to (``mp ws2 cpu``) in its ``user_properties``, so
that every report (including a skip before setup, and reports written by an
isolated test process) can be folded into the :class:`~harness.report.ClauseMatrix`:

- passed call: pass;
- failed in any phase: FAIL for the test's clauses, except a leak found after
  the test (``harness_leak`` set by the ``executor`` fixture), which is a
  finding under C9, named with the test that exposed it: the test's own
  clauses keep their verdict;
- skipped: declared (the backend's declaration), not applicable and blocked by
  Cn (``_checks.not_applicable`` / ``blocked_by``), else not run with the reason;
- deselected (``-k``, ``-m``): not run, in the columns the run has.

At the end, a named backend whose every cell is "not run" (or that has none)
checked nothing, and the run fails with the reason (SPEC.md, "Outcomes").
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.backends import LoadedBackend
from harness.conformance._checks import BLOCKED_BY, NOT_APPLICABLE
from harness.pytest_plugin import residue as _residue
from harness.pytest_plugin.options import Options, Unavailable, Variant, clauses_of, variant_of
from harness.report import (
    BLOCKED,
    DECLARED,
    FAIL,
    FILTERED_OUT,
    NOT_RUN,
    PASS,
    ClauseMatrix,
    column_name,
)
from harness.report import NOT_APPLICABLE as NOT_APPLICABLE_OUTCOME

__all__ = ["MatrixCollector", "tag_item"]

#: The clause a leak found after a test is reported under.
LEAK_CLAUSE = "C9"
_MAX_NOTE = 400


def device_of(item: pytest.Item) -> str:
    return "cuda" if item.get_closest_marker("gpu") is not None else "cpu"


def tag_item(item: pytest.Item) -> None:
    """Give a backend test the properties its reports carry into the matrix."""
    clauses = clauses_of(item)
    variant = variant_of(item)
    if not clauses or variant is None:
        return
    if isinstance(variant, Variant):
        name, ws, vid = variant.backend.name, variant.world_size, variant.id
    else:
        name, ws, vid = variant.name, variant.world_size, variant.id
    item.user_properties += [
        ("harness_clauses", ",".join(clauses)),
        ("harness_backend", name),
        ("harness_column", column_name(name, ws, device_of(item))),
        ("harness_test", f"{item.name.split('[')[0]}[{vid}]"),
        ("harness_variant", vid),
    ]


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _failure_message(report: pytest.TestReport) -> str:
    """The failure's own message: the line a reader needs first."""
    longrepr: Any = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    text = str(crash.message) if crash is not None else str(longrepr)
    text = " ".join(text.split())
    return text if len(text) <= _MAX_NOTE else text[: _MAX_NOTE - 3] + "..."


class MatrixCollector:
    """Folds each test report into the clause matrix (a plugin object, so the
    report hooks reach the matrix without a global)."""

    def __init__(self, matrix: ClauseMatrix, opts: Options) -> None:
        self.matrix = matrix
        self.opts = opts
        self.saw_backend_tests = False
        #: variant id -> "<variant> in <test>: <error>", for a factory that failed with the variant's config
        self.factory_failures: dict[str, str] = {}
        self._deselected: list[pytest.Item] = []
        #: Failures pytest counted as expected that no known-failures list names (a leak after a listed test).
        self.unlisted_failures: list[str] = []
        #: The leak entries of known-failures lists ("FILE:LINE") the run's tests had, and those a test met.
        self.leak_entries: set[str] = set()
        self.known_leaks: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Fold one report into the matrix."""
        props = dict(report.user_properties)
        if "harness_clauses" not in props:
            return
        column, test = str(props["harness_column"]), str(props["harness_test"])
        if "harness_factory_failed" in props and report.failed:
            variant = str(props["harness_variant"])
            self.factory_failures.setdefault(variant, f"{variant} in {test}: {props['harness_factory_failed']}")
        if "harness_residue" in props:
            # A second start proved these leftovers the process's: the tests forked from now on may reuse it.
            _residue.remember(str(props["harness_variant"]), str(props["harness_residue"]), test)
        clauses = str(props["harness_clauses"]).split(",")
        notes = "; ".join(str(v) for k, v in report.user_properties if k == "harness_note")
        add = self.matrix.add
        known = getattr(report, "wasxfail", None)
        if report.when == "teardown" and "harness_leak" in props and known is not None:
            # The leak check failed after a test listed as a known failure: pytest reads
            # it as that test's expected failure, but it is C9's, and not on the list.
            add(str(props["harness_leak"]), column, FAIL, test, f"found after the test: {_failure_message(report)}")
            self.unlisted_failures.append(f"{report.nodeid}: {_failure_message(report)}")
            return
        if report.skipped and known is not None:
            # A known failure (pytest_plugin.expected) is a failure: the list keeps the run green, not the clause.
            # The note keeps what was seen, not only what the list expected: the evidence.
            seen = _failure_message(report) if report.longrepr else ""
            note = f"{known}; seen: {seen}" if seen else str(known)
            for clause in clauses:
                add(clause, column, FAIL, test, note)
            return
        if report.failed and str(report.longrepr).startswith("[XPASS(strict)]"):
            reason = str(report.longrepr).removeprefix("[XPASS(strict)]").strip()
            for clause in clauses:
                add(clause, column, PASS, test, f"UNEXPECTED PASS of a listed {reason}: remove it from the list")
            return
        if report.failed:
            message = _failure_message(report)
            if report.when == "teardown" and "harness_leak" in props:
                add(str(props["harness_leak"]), column, FAIL, test, f"found after the test: {message}")
                return
            for clause in clauses:
                add(clause, column, FAIL, test, message)
        elif report.skipped:
            reason = _skip_reason(report)
            for clause in clauses:
                if "harness_declared" in props:
                    add(clause, column, DECLARED, test, str(props["harness_declared"]))
                elif reason.startswith(NOT_APPLICABLE):
                    add(clause, column, NOT_APPLICABLE_OUTCOME, test, reason.removeprefix(NOT_APPLICABLE).strip())
                elif reason.startswith(BLOCKED_BY):
                    blocker, _, why = reason.removeprefix(BLOCKED_BY).partition("]")
                    add(clause, column, BLOCKED + blocker, test, why.strip())
                else:
                    add(clause, column, NOT_RUN, test, reason)
        elif report.passed and report.when == "teardown" and "harness_known_leak" in props:
            # A leak the backend's list names: C9 fails, the run goes on (harness.pytest_plugin.expected).
            add(LEAK_CLAUSE, column, FAIL, test, f"found after the test: {props['harness_known_leak']}")
            self.known_leaks.add(str(props.get("harness_known_leak_where", "")))
        elif report.passed and (report.when == "call" or (report.when == "teardown" and notes)):
            # Notes added in teardown (the leak check's) reach only the teardown report.
            for clause in clauses:
                add(clause, column, PASS, test, notes)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Remember tests filtered out, to show them as not run."""
        self._deselected += items

    def finish(self, session: pytest.Session) -> None:
        """Fold in the deselected tests; name the backends nothing was checked for
        (not in a run that only collects)."""
        columns = set(self.matrix.columns)
        for item in self._deselected:
            props = dict(item.user_properties)
            if "harness_clauses" in props and props["harness_column"] in columns:
                for clause in str(props["harness_clauses"]).split(","):
                    self.matrix.add(
                        clause, str(props["harness_column"]), NOT_RUN, str(props["harness_test"]), FILTERED_OUT
                    )
        if not self.saw_backend_tests or session.config.option.collectonly:
            return
        for name in self.opts.backends:
            if self.matrix.only_not_run(name):
                self.matrix.not_checked[name] = self._why_nothing(name)
        if (self.matrix.not_checked or self.unlisted_failures) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _why_nothing(self, name: str) -> str:
        reasons = self.matrix.not_run_reasons(name)
        if reasons:
            return "every selected check was not run: " + "; ".join(reasons)
        loaded = self.opts.loaded.get(name)
        requested = sorted(
            {
                ws
                for sm in self.opts.start_methods
                for ws in self.opts.world_sizes_of(name, sm, loaded if isinstance(loaded, LoadedBackend) else None)
            }
        )
        if isinstance(loaded, LoadedBackend) and not any(loaded.supports_world_size(ws) for ws in requested):
            return f"its declared world_sizes {loaded.world_sizes} exclude every requested size {requested}"
        return "no test of it was selected (-k, -m or the paths given matched none)"


def is_unavailable(item: pytest.Item) -> bool:
    return isinstance(variant_of(item), Unavailable)
