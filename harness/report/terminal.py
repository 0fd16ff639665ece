"""The clause matrix as text for a terminal: it fits the terminal's width.

Two things kept ``make conform``'s matrix from fitting (14 columns, about 250
characters a line, on a machine without a GPU):

- columns of which every cell reads ``not run`` (the ``cuda`` columns without a
  GPU, the node columns without root) fold into one line each under the matrix,
  grouped by what follows the world size (``cuda``, ``cpu 2 nodes``), with the
  reasons and, for ``cuda``, how to run them;
- a matrix still wider than the terminal breaks into several tables, each a
  whole number of backends (a backend's columns stay side by side), and the
  clause summaries move to a legend of their own.

::

    ClauseMatrix ──► fold the all-``not run`` columns ──► blocks of backends that fit
                                                   │                    │
                                   "cuda: not run in every column …"   tables, then the legend, then the notes

A folded column is not a pass: a run whose backends were all ``not run`` still
says NOTHING CHECKED and fails (SPEC.md, "Outcomes").
"""

from __future__ import annotations

import dataclasses
import shutil
import textwrap
from typing import TYPE_CHECKING

from harness.contract import CLAUSES

if TYPE_CHECKING:
    from harness.report import ClauseMatrix

#: A width to assume where the terminal's is unknown (a pipe, CI's log): what
#: shutil falls back to.
DEFAULT_WIDTH = 80
#: How many reasons a folded line names before it counts the rest.
MOST_REASONS = 3
#: How to run the columns of a device that did not run for want of it.
HOW_TO_RUN = {"cuda": "on a GPU runner: `pytest -m gpu` or `make gpu-test`"}
CLAUSE_WIDTH = 7
GAP = "   "
#: The least room a summary beside a table is given before it moves to the legend.
LEAST_SUMMARY = 30


def terminal_width() -> int:
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def kind_of_column(column: str) -> str:
    """What follows the world size in a column's name: ``cuda`` for ``mp ws2 cuda``,
    ``cpu 2 nodes`` for ``ray ws4 cpu 2 nodes``."""
    words = column.split(" ")
    at = next((i for i, w in enumerate(words) if w.startswith("ws") and w[2:].isdigit()), len(words) - 2)
    return " ".join(words[at + 1 :])


def folded_columns(matrix: ClauseMatrix) -> dict[str, list[str]]:
    """Columns of which no test ran (every result ``not run``), by :func:`kind_of_column`."""
    from harness.report import NOT_RUN

    results: dict[str, list[str]] = {}
    for (_, column), cell in matrix.cells.items():
        results.setdefault(column, []).extend(r.outcome for r in cell)
    out: dict[str, list[str]] = {}
    for column in matrix.columns:
        if results.get(column) and all(o == NOT_RUN for o in results[column]):
            out.setdefault(kind_of_column(column), []).append(column)
    return out


@dataclasses.dataclass(frozen=True)
class Fold:
    """Columns of one :func:`kind_of_column` of which no test ran, and why: what
    the terminal prints as one line under its matrix and the HTML page as its
    note above the matrix (both read it here, so they say the same)."""

    kind: str
    columns: tuple[str, ...]
    #: Every distinct reason their tests give, in the order met.
    reasons: tuple[str, ...]

    @property
    def where(self) -> str:
        """``every backend``, or the one backend whose columns these are."""
        backends = {c.split(" ws")[0] for c in self.columns}
        return "every backend" if len(backends) > 1 else self.columns[0].split(" ws")[0]

    @property
    def how_to_run(self) -> str:
        return HOW_TO_RUN.get(self.kind, "")

    def line(self, most: int | None = MOST_REASONS) -> str:
        """``cuda: not run for every backend (mp ws1, mp ws2): needs 1 GPU, found 0; …``,
        naming at most ``most`` reasons (None: all of them)."""
        reasons = list(self.reasons)
        if most is not None and len(reasons) > most:
            reasons = [*reasons[:most], f"and {len(reasons) - most} more"]
        short = ", ".join(c.replace(" " + self.kind, "") for c in self.columns)
        line = f"{self.kind}: not run for {self.where} ({short})"
        if reasons:
            line += ": " + "; ".join(reasons)
        if self.how_to_run:
            line += f"; {self.how_to_run}"
        return line


def fold_reasons(matrix: ClauseMatrix, columns: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The distinct reasons the tests of ``columns`` give for not running; a test
    filtered out of the run (``-k``, ``-m``) says so once, where nothing else does."""
    from harness.report import is_filtered

    reasons: list[str] = []
    filtered = False
    for (_, column), results in matrix.cells.items():
        for r in results if column in columns else ():
            if is_filtered(r):
                filtered = True
            elif r.note and r.note not in reasons:
                reasons.append(r.note)
    if filtered and not reasons:
        reasons.append("filtered out of this run (-k, -m, --harness-sample)")
    return tuple(reasons)


def folds(matrix: ClauseMatrix) -> list[Fold]:
    """The matrix's :func:`folded_columns`, each kind with its reasons."""
    return [
        Fold(kind, tuple(columns), fold_reasons(matrix, columns)) for kind, columns in folded_columns(matrix).items()
    ]


def fold_line(matrix: ClauseMatrix, kind: str, columns: list[str]) -> str:
    return Fold(kind, tuple(columns), fold_reasons(matrix, columns)).line()


def blocks_of(columns: list[str], width: int, cell: int) -> list[list[str]]:
    """The columns in tables that each fit ``width``, a backend's columns together
    (split only where one backend alone is wider)."""
    from harness.report import backend_of_column

    fits = max(1, (width - CLAUSE_WIDTH) // cell)
    by_backend: dict[str, list[str]] = {}
    for column in columns:
        by_backend.setdefault(backend_of_column(column), []).append(column)
    blocks: list[list[str]] = []
    for backend_columns in by_backend.values():
        for start in range(0, len(backend_columns), fits):
            part = backend_columns[start : start + fits]
            if blocks and len(blocks[-1]) + len(part) <= fits:
                blocks[-1] += part
            else:
                blocks.append(list(part))
    return blocks


def render(matrix: ClauseMatrix, width: int | None = None) -> str:
    width = width or terminal_width()
    folded = folded_columns(matrix)
    hidden = {c for cols in folded.values() for c in cols}
    shown = [c for c in matrix.columns if c not in hidden]
    clauses = [cl for cl in matrix.clauses if any((cl, c) in matrix.cells for c in shown)]
    lines: list[str] = []
    if shown:
        labels = [matrix.label(cl, c) or "-" for cl in clauses for c in shown]
        cell = max(14, *(len(c) for c in shown), *(len(text) for text in labels)) + 2
        blocks = blocks_of(shown, width, cell)
        beside = len(blocks) == 1 and width - CLAUSE_WIDTH - cell * len(shown) - len(GAP) >= LEAST_SUMMARY
        for i, block in enumerate(blocks):
            head = f"{'clause':<{CLAUSE_WIDTH}}" + "".join(f"{c:>{cell}}" for c in block)
            room = width - len(head) - len(GAP)
            lines += [""] if i else []
            lines += [
                head + (GAP + "summary" if beside else ""),
                "-" * min(width, len(head) + (len(GAP) + 7 if beside else 0)),
            ]
            for clause in clauses:
                row = f"{clause:<{CLAUSE_WIDTH}}" + "".join(f"{matrix.label(clause, c) or '-':>{cell}}" for c in block)
                lines.append(row + (GAP + _cut(CLAUSES[clause], room) if beside else ""))
        if not beside:
            lines += ["", "clauses:"] + [f"  {cl:<5}{_cut(CLAUSES[cl], width - 7)}" for cl in clauses]
    elif not folded:
        lines.append("no clause was checked")
    if folded:
        lines.append("")
        for kind, cols in folded.items():
            lines += textwrap.wrap(fold_line(matrix, kind, cols), width, subsequent_indent="    ")
    if shown:
        lines += ["", *textwrap.wrap(matrix.summary_line(shown), width, subsequent_indent="    ")]
    notes = matrix.notes(shown)
    if notes:
        lines += ["", *(f"  {n}" for n in notes)]
    for backend, why in matrix.not_checked.items():
        lines.append(f"NOTHING CHECKED for backend {backend!r}: {why}")
    lines += matrix.removed_lines()
    return "\n".join(lines)


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(room - 1, 0)] + "…"
