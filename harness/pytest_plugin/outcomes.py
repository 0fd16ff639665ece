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

import functools
import json
from typing import Any

import pytest

from harness.backends import LoadedBackend
from harness.pytest_plugin import residue as _residue
from harness.pytest_plugin.markers import GPU
from harness.pytest_plugin.options import Options, Variant, clauses_of, variant_of
from harness.report import DECLARED, FAIL, FILTERED_OUT, NOT_RUN, PASS, ClauseMatrix, column_name
from harness.verdicts import LEAK_CLAUSE, Prop, read_skip_reason

__all__ = ["MatrixCollector", "tag_item"]

_MAX_NOTE = 400
#: The most of a failure's text a report keeps (the stacks of a hung run's processes can be long).
_MAX_DETAIL = 16_000


def device_of(item: pytest.Item) -> str:
    return "cuda" if item.get_closest_marker(GPU) is not None else "cpu"


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
    nodes = variant.nodes
    item.user_properties += [
        (Prop.CLAUSES, ",".join(clauses)),
        (Prop.BACKEND, name),
        (Prop.COLUMN, column_name(name, ws, device_of(item), nodes)),
        # The test's whole name, every parameter included: it pastes into -k.
        (Prop.TEST, item.name),
        (Prop.VARIANT, vid),
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


def _failure_detail(report: pytest.TestReport) -> str:
    """A failure's whole text, its head and tail where it is longer than :data:`_MAX_DETAIL`."""
    text = str(report.longrepr or "")
    if len(text) <= _MAX_DETAIL:
        return text
    cut = len(text) - _MAX_DETAIL
    return text[: _MAX_DETAIL * 3 // 4] + f"\n[... {cut} characters left out ...]\n" + text[-_MAX_DETAIL // 4 :]


class MatrixCollector:
    """Folds each test report into the clause matrix (a plugin object, so the
    report hooks reach the matrix without a global)."""

    def __init__(self, matrix: ClauseMatrix, opts: Options, config: pytest.Config) -> None:
        self.matrix = matrix
        self.opts = opts
        self._config = config
        self._dirty = False
        self.saw_backend_tests = False
        #: variant id -> "<variant> in <test>: <error>", for a factory that failed with the variant's config
        self.factory_failures: dict[str, str] = {}
        #: (clauses, column, test) of the backend tests filtered out (-k, -m, --clause)
        self._deselected: set[tuple[str, str, str]] = set()
        #: Where the matrix goes as JSON after every report (a run cut off keeps what it found); None: nowhere.
        self.json_path: str | None = None
        #: nodeid -> its failure lines, printed when the test ends.
        self._failures_of: dict[str, list[str]] = {}
        #: Failures pytest counted as expected that no known-failures list names (a leak after a listed test).
        self.unlisted_failures: list[str] = []
        #: The leak entries of known-failures lists ("FILE:LINE") the run's tests had, and those a test met.
        self.leak_entries: set[str] = set()
        self.known_leaks: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Fold one report into the matrix."""
        props = dict(report.user_properties)
        if Prop.CLAUSES not in props:
            return
        column, test = str(props[Prop.COLUMN]), str(props[Prop.TEST])
        if Prop.FACTORY_FAILED in props and report.failed:
            variant = str(props[Prop.VARIANT])
            self.factory_failures.setdefault(variant, f"{variant} in {test}: {props[Prop.FACTORY_FAILED]}")
        if Prop.RESIDUE in props:
            # A second start proved these leftovers the process's: the tests forked from now on may reuse it.
            _residue.remember(str(props[Prop.VARIANT]), str(props[Prop.RESIDUE]), test)
        if Prop.LEAKED in props:
            # A second start left these again: the tests forked from now on that leave no more need none.
            _residue.remember(str(props[Prop.VARIANT]), str(props[Prop.LEAKED]), test, _residue.LEAKED)
        self.saw_backend_tests = True
        self._dirty = False
        if Prop.REMOVED in props:
            self.matrix.add_removed(str(props[Prop.BACKEND]), json.loads(str(props[Prop.REMOVED])))
            done = "kept" if self.matrix.kept else "removed after it"
            self.matrix.settings.setdefault(
                "leftovers",
                f"each test's own TMPDIR and {props.get(Prop.SHM)}; what a test's processes left is {done}",
            )
            self._dirty = True
        self._fold(report, props, column, test)
        if self._dirty and self.json_path:
            self.matrix.write(self.json_path, None)

    def _fold(self, report: pytest.TestReport, props: dict[str, Any], column: str, test: str) -> None:
        clauses = str(props[Prop.CLAUSES]).split(",")
        notes = "; ".join(str(v) for k, v in report.user_properties if k == Prop.NOTE)
        add = functools.partial(self._add, report)
        known = getattr(report, "wasxfail", None)
        if report.when == "teardown" and Prop.LEAK in props and known is not None:
            # The leak check failed after a test listed as a known failure: pytest reads
            # it as that test's expected failure, but it is C9's, and not on the list.
            add(str(props[Prop.LEAK]), column, FAIL, test, f"found after the test: {_failure_message(report)}")
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
            if report.when == "teardown" and Prop.LEAK in props:
                add(str(props[Prop.LEAK]), column, FAIL, test, f"found after the test: {message}")
                return
            for clause in clauses:
                add(clause, column, FAIL, test, message)
        elif report.skipped:
            reason = _skip_reason(report)
            said = read_skip_reason(reason)
            for clause in clauses:
                if Prop.DECLARED in props:
                    add(clause, column, DECLARED, test, str(props[Prop.DECLARED]))
                elif said is not None:
                    outcome, why = said
                    add(clause, column, outcome, test, why)
                else:
                    add(clause, column, NOT_RUN, test, reason)
        elif report.passed and report.when == "teardown" and Prop.KNOWN_LEAK in props:
            # A leak the backend's list names: C9 fails, the run goes on (harness.pytest_plugin.expected).
            add(LEAK_CLAUSE, column, FAIL, test, f"found after the test: {props[Prop.KNOWN_LEAK]}")
            self.known_leaks.add(str(props.get(Prop.KNOWN_LEAK_WHERE, "")))
        elif report.passed and (report.when == "call" or (report.when == "teardown" and notes)):
            # Notes added in teardown (the leak check's) reach only the teardown report.
            for clause in clauses:
                add(clause, column, PASS, test, notes)

    def _add(self, report: pytest.TestReport, clause: str, column: str, outcome: str, test: str, note: str) -> None:
        """One cell's result; a failure is also kept to be printed when its test ends.
        A failure on a machine busier than its CPUs says so: SPEC's own time
        bounds were judged under that load."""
        load = float(str(dict(report.user_properties).get(Prop.LOAD, 0.0)))
        if outcome == FAIL and load > 1.0:
            note = f"{note} [the machine was loaded: {load:.1f} runnable per CPU]"
        self.matrix.add(clause, column, outcome, test, note, _failure_detail(report) if outcome == FAIL else "")
        self._dirty = True
        if outcome == FAIL:
            self._failures_of.setdefault(report.nodeid, []).append(f"FAIL {clause} [{column}] {test}: {note}")

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        """Print a test's failures as it ends (the summary has them too): a long
        run cut off has still shown every failure it met."""
        lines = self._failures_of.pop(nodeid, [])
        reporter = self._config.pluginmanager.get_plugin("terminalreporter") if lines else None
        if reporter is not None:
            for line in lines:
                reporter.write_line(line, red=True)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Remember backend tests filtered out, to show them as not run."""
        for item in items:
            props = dict(item.user_properties)
            if Prop.CLAUSES in props:
                self._deselected.add((str(props[Prop.CLAUSES]), str(props[Prop.COLUMN]), str(props[Prop.TEST])))

    def to_worker_output(self) -> dict[str, Any]:
        """What an xdist worker knows that its reports do not carry: for the controller's matrix."""
        return {
            "saw_backend_tests": self.saw_backend_tests,
            "deselected": sorted(self._deselected),
            "leak_entries": sorted(self.leak_entries),
            "settings": {k: v for k, v in self.matrix.settings.items() if k.startswith("known failures of ")},
        }

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """On the xdist controller: take in what a worker collected (each collects every test)."""
        out = getattr(node, "workeroutput", {}).get("harness")
        if not out:
            return
        self.saw_backend_tests |= bool(out["saw_backend_tests"])
        self._deselected.update(tuple(d) for d in out["deselected"])
        self.leak_entries.update(out["leak_entries"])
        self.matrix.settings.update(out["settings"])

    def finish(self, session: pytest.Session) -> None:
        """Fold in the deselected tests; name the backends nothing was checked for
        (not in a run that only collects)."""
        columns = set(self.matrix.columns)
        for clauses, column, test in sorted(self._deselected):
            if column in columns:
                for clause in clauses.split(","):
                    self.matrix.add(clause, column, NOT_RUN, test, FILTERED_OUT)
        self.matrix.filters = self._filters(session.config)
        if not self.saw_backend_tests or session.config.option.collectonly:
            return
        for name in self.opts.backends:
            if self.matrix.only_not_run(name):
                self.matrix.not_checked[name] = self._why_nothing(name)
        if (self.matrix.not_checked or self.unlisted_failures) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _filters(self, config: pytest.Config) -> list[str]:
        """The run's filters in force, as given: why a cell's other tests did not run."""
        found = []
        if self.opts.sample:
            found.append(f"--harness-sample {','.join(self.opts.sample)}")
        if self.opts.sample_others:
            found.append("--harness-sample-others (a backend's other start methods run one test of every clause)")
        if self.opts.clauses:
            found.append(f"--clause {','.join(self.opts.clauses)}")
        keyword = config.getoption("keyword", "")
        if keyword:
            found.append(f"-k {keyword!r}")
        marks = config.getoption("markexpr", "")
        if marks:
            found.append(f"-m {marks!r}")
        return found

    def _why_nothing(self, name: str) -> str:
        reasons = self.matrix.not_run_reasons(name)
        if reasons:
            return "every selected check was not run: " + "; ".join(reasons)
        unchecked = self.matrix.unchecked_outcomes(name)
        if unchecked:
            return "every selected clause was declared unsupported or not applicable: " + "; ".join(unchecked)
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
