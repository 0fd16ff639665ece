"""The report as one self-contained HTML page (``--report-html``), and a diff as one.

The page is read offline, often as a CI artifact: its style and script are
inline, it loads nothing. The clause x variant matrix is coloured by outcome;
each cell is a button (Tab to it, Enter opens it, the arrow keys move between
cells) that opens the cell's evidence: each of its tests with its outcome, the
failure's message and whole text (a timeout's stacks, what leaked), the
known-failures line that matched, and the one command that reruns that cell::

    ClauseMatrix ──► rows and cells (outcome, label, css class, tests, rerun) ──► templates/page.html.j2 ──► one file

A cell of which the run filtered out some tests reads as the terminal's does,
``pass (4 of 6)``: its tooltip says why, its evidence lists the tests left out,
and the badges count such cells apart ("partly run").

Columns of which no test ran (the ``cuda`` columns of a machine without a GPU)
fold as the terminal's do (:mod:`harness.report.terminal`, :class:`Fold`): the
matrix hides them behind one checkbox, a note above it names them and why, and
the outcome badges count the shown matrix alone, its folded cells a line of the
note, so ``make conform`` without a GPU does not open on "not run 90". A wide
matrix scrolls inside its frame, its clause column held in view.

Jinja2 renders it, autoescaped: a test's text is shown, never run as markup.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Any

from harness.contract import CLAUSES
from harness.report import ClauseMatrix
from harness.report.terminal import Fold, folds
from harness.verdicts import blocker_of

#: A known failure's note names the list's line: "known failure, vllm_known_failures.txt:23 (…)".
_KNOWN = re.compile(r"known failure, (\S+:\d+)")
_COLUMN = re.compile(r"^(?P<backend>.+) ws(?P<ws>\d+) (?P<device>\S+)(?: (?P<nodes>\d+) nodes)?$")


def css_of(outcome: str | None) -> str:
    """The class an outcome is coloured by: pass, fail, declared, na, blocked, notrun, none."""
    if outcome is None:
        return "none"
    if blocker_of(outcome):
        return "blocked"
    return {"pass": "pass", "FAIL": "fail", "declared": "declared", "not applicable": "na"}.get(outcome, "notrun")


def cell_id(clause: str, column: str) -> str:
    """An id fit for HTML and a URL's fragment: ``C4--mp-ws2-cpu``."""
    return f"{clause}--" + re.sub(r"[^A-Za-z0-9_.-]+", "-", column).strip("-")


def rerun_command(clause: str, column: str, tests: list[str] | None = None) -> str:
    """The command that runs exactly this cell again: its clause, backend, world
    size, device tier, nodes, and the start methods its tests ran with (read off
    their ids, ``[mp-ws2-spawn]``)."""
    match = _COLUMN.match(column)
    if match is None:
        return f"python -m harness conform --clause {clause}"
    backend, ws = match["backend"], match["ws"]
    words = ["python", "-m", "harness", "conform", "--backend", backend, "--world-size", ws]
    words += ["--clause", clause, "-m", "gpu" if match["device"] == "cuda" else "not gpu"]
    if match["nodes"]:
        words += ["--nodes", match["nodes"]]
    ran = re.compile(rf"\[{re.escape(backend)}-ws{ws}-([a-z]+)[\]-]")
    methods: list[str] = []
    for test in tests or ():
        found = ran.search(test)
        if found and found[1] not in methods:
            methods.append(found[1])
    if methods:
        words += ["--start-method", ",".join(methods)]
    return " ".join(shlex.quote(w) for w in words)


@dataclasses.dataclass
class _Test:
    test: str
    outcome: str
    css: str
    note: str
    known: str
    detail: str


@dataclasses.dataclass
class _Cell:
    id: str
    clause: str
    column: str
    outcome: str
    css: str
    summary: str
    rerun: str
    tests: list[_Test]
    #: What the cell reads: its outcome, "pass (4 of 6)" where the run filtered out some of its tests.
    label: str = ""
    #: The tests that ran, and all of them (filtered out ones too).
    ran: int = 0
    of: int = 0
    #: The tests the run filtered out, and why (the run's filters).
    filtered: list[str] = dataclasses.field(default_factory=list)
    why_filtered: str = ""

    @property
    def tooltip(self) -> str:
        text = f"{self.clause} [{self.column}]: {self.outcome}"
        if self.filtered and self.ran:
            text += f"; {self.ran} of {self.of} tests ran, {len(self.filtered)} filtered out of this run"
            text += f" ({self.why_filtered})" if self.why_filtered else ""
        return text


def _cells(matrix: ClauseMatrix, folded: set[str]) -> tuple[list[dict[str, Any]], list[_Cell]]:
    """The matrix's rows (a row is folded where all its cells are in ``folded``
    columns: nothing of it would show) and every cell, folded or not."""
    rows: list[dict[str, Any]] = []
    cells: list[_Cell] = []
    for clause in matrix.clauses:
        row: list[_Cell | None] = []
        for column in matrix.columns:
            outcome = matrix.outcome(clause, column)
            if outcome is None:
                row.append(None)
                continue
            tests = [
                _Test(
                    r.test, r.outcome, css_of(r.outcome), r.note, m[1] if (m := _KNOWN.search(r.note)) else "", r.detail
                )
                for r in sorted(matrix.cells[(clause, column)], key=lambda r: (-_worst_first(r.outcome), r.test))
            ]
            ran, of = matrix.coverage(clause, column)
            cell = _Cell(
                cell_id(clause, column), clause, column, outcome, css_of(outcome), CLAUSES.get(clause, ""),
                rerun_command(clause, column, [t.test for t in tests]), tests,
                matrix.label(clause, column) or outcome, ran, of, matrix.filtered_tests(clause, column),
                ", ".join(matrix.filters),
            )  # fmt: skip
            row.append(cell)
            cells.append(cell)
        shown = any(c is not None and c.column not in folded for c in row)
        rows.append({"clause": clause, "summary": CLAUSES.get(clause, ""), "cells": row, "folded": not shown})
    return rows, cells


def _worst_first(outcome: str) -> int:
    order = ("fail", "blocked", "notrun", "pass", "na", "declared")
    return len(order) - order.index(css_of(outcome))


def page_folds(matrix: ClauseMatrix) -> list[Fold]:
    """The terminal's folds (:func:`harness.report.terminal.folds`), unless they
    would fold every column: a matrix of nothing but a note hides the one table
    that says what did not run, so then nothing folds."""
    found = folds(matrix)
    if sum(len(f.columns) for f in found) == len(matrix.columns):
        return []
    return found


def _environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("harness.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_page(matrix: ClauseMatrix, title: str = "harness conformance report") -> str:
    fold_list = page_folds(matrix)
    folded = {c for f in fold_list for c in f.columns}
    rows, cells = _cells(matrix, folded)
    return str(
        _environment()
        .get_template("page.html.j2")
        .render(
            title=title,
            state=matrix.state,
            settings=[
                (k, v if isinstance(v, str) else ", ".join(map(str, v)) if isinstance(v, list) else str(v))
                for k, v in matrix.settings.items()
            ],
            columns=matrix.columns,
            rows=rows,
            cells=cells,
            folds=fold_list,
            folded=folded,
            tally=list(matrix.tally(c for c in matrix.columns if c not in folded).items()),
            partly=[c for c in cells if c.column not in folded and c.ran and c.filtered],
            coverage=matrix.coverage_line([c for c in matrix.columns if c not in folded]) or "",
            folded_tally=list(matrix.tally(folded).items()),
            css_of=css_of,
            not_checked=sorted(matrix.not_checked.items()),
            removed=matrix.removed_lines(),
        )
    )


def write_page(matrix: ClauseMatrix, path: str, title: str = "harness conformance report") -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_page(matrix, title))


def render_diff_page(changes: list[Any], old_name: str, new_name: str) -> str:
    from harness.report.diff import ABSENT

    items = [
        {
            "clause": c.clause,
            "column": c.column,
            "old": c.old_label or c.old or ABSENT,
            "new": c.new_label or c.new or ABSENT,
            "old_css": css_of(c.old),
            "new_css": css_of(c.new),
            "word": c.word,
            "summary": CLAUSES.get(c.clause, ""),
            "tests": [
                {"test": t.test, "old": t.old or ABSENT, "new": t.new or ABSENT, "note": t.note} for t in c.tests
            ],
        }
        for c in changes
    ]
    return str(
        _environment()
        .get_template("diff.html.j2")
        .render(old=old_name, new=new_name, changes=items, worse=sum(c.worse for c in changes))
    )
