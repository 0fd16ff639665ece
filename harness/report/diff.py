"""Two runs compared cell by cell: ``python -m harness report diff OLD.json NEW.json``.

A CI reviewer asks "did this change break a clause?"; a maintainer "which
release fixed C7?". The answer is the cells whose outcome moved, each with the
tests behind the move::

    OLD.json ─┐
              ├─► every (clause, column) in either ─► outcome moved? ─► CellChange (worse or not)
    NEW.json ─┘                                            └─► the tests whose own outcome moved

A cell is *worse* when its new outcome is lower in :data:`STANDING`: a pass
that became FAIL, ``not run``, ``declared`` or ``blocked``; a cell that
vanished (its variant no longer ran) counts as ``not run``. Any worse cell makes
the command exit 1. A cell whose outcome stayed while the share of its tests
that ran moved (``pass (4 of 6)`` -> ``pass``: a sampled run beside a whole
one) changed its coverage, not its verdict: listed as such, never worse.
"""

from __future__ import annotations

import dataclasses

from harness.report import DECLARED, FAIL, NOT_APPLICABLE, NOT_RUN, PASS, ClauseMatrix, backend_of_column
from harness.verdicts import BLOCKED, blocker_of

#: How good an outcome is, for "worse": checked and held, then said not to
#: apply, then declared, then not checked, then broken.
STANDING = {PASS: 5, NOT_APPLICABLE: 5, DECLARED: 3, NOT_RUN: 2, BLOCKED: 1, FAIL: 0}
#: What a cell absent from one run reads as, for the diff.
ABSENT = "absent"


def standing(outcome: str | None) -> int:
    if outcome is None:
        return STANDING[NOT_RUN]
    return STANDING[BLOCKED] if blocker_of(outcome) else STANDING[outcome]


@dataclasses.dataclass(frozen=True)
class TestChange:
    """One test whose own outcome moved (``None``: not in that run)."""

    test: str
    old: str | None
    new: str | None
    note: str  # the new result's note, else the old's


@dataclasses.dataclass(frozen=True)
class CellChange:
    clause: str
    column: str
    old: str | None
    new: str | None
    tests: tuple[TestChange, ...]
    #: The cell as each run's report reads it ("pass (4 of 6)"), where that differs from its outcome.
    old_label: str | None = None
    new_label: str | None = None

    @property
    def worse(self) -> bool:
        return standing(self.new) < standing(self.old)

    @property
    def coverage_only(self) -> bool:
        """The outcome stayed; only how many of the cell's tests ran moved."""
        return self.old == self.new and self.old_label != self.new_label

    @property
    def word(self) -> str:
        """ "worse", "better", "moved" (to an outcome that stands as high), or
        "coverage" (the same outcome from more or fewer of its tests)."""
        if self.coverage_only:
            return "coverage"
        return "worse" if self.worse else "better" if standing(self.new) > standing(self.old) else "moved"

    def describe(self) -> str:
        word = self.word.upper() if self.worse else self.word
        if self.coverage_only:
            word = "coverage, not verdict"
        before, after = self.old_label or self.old or ABSENT, self.new_label or self.new or ABSENT
        return f"{self.clause} [{self.column}]: {before} -> {after} ({word})"


def backends_of(matrix: ClauseMatrix) -> set[str]:
    return {backend_of_column(column) for _, column in matrix.cells}


def variant_by_variant(matrix: ClauseMatrix, backend: str) -> ClauseMatrix:
    """``matrix`` (of ``backend`` alone) with the backend's name taken out of its
    columns and test ids: ``ws2 cpu``, ``test_c5[ws2-fork]``, to compare with another backend's."""
    out = ClauseMatrix(settings=matrix.settings, not_checked=matrix.not_checked)
    for (clause, column), results in matrix.cells.items():
        for r in results:
            test = r.test.replace(f"[{backend}-", "[", 1)
            out.add(clause, column.removeprefix(f"{backend} "), r.outcome, test, r.note, r.detail)
    return out


def paired_backends(old: ClauseMatrix, new: ClauseMatrix) -> tuple[str, str] | None:
    """(old's backend, new's) where each run is of one backend, and not the same one."""
    old_backends, new_backends = backends_of(old), backends_of(new)
    if len(old_backends) == 1 and len(new_backends) == 1 and old_backends != new_backends:
        return old_backends.pop(), new_backends.pop()
    return None


def diff(old: ClauseMatrix, new: ClauseMatrix, within: bool = False) -> list[CellChange]:
    """The cells whose outcome differs, in clause then column order; with
    ``within``, also a cell whose outcome stayed while a test's own outcome in it
    moved (a FAIL cell can read FAIL in both runs while one of its tests went from
    FAIL to pass). Two runs of one backend each, different ones (a broken backend
    against ``mp``), compare variant by variant (:func:`variant_by_variant`)."""
    paired = paired_backends(old, new)
    if paired is not None:
        old, new = variant_by_variant(old, paired[0]), variant_by_variant(new, paired[1])
    keys = sorted(set(old.cells) | set(new.cells), key=lambda k: (clause_order(k[0]), k[1]))
    changes = []
    for clause, column in keys:
        before, after = old.outcome(clause, column), new.outcome(clause, column)
        before_label, after_label = old.label(clause, column), new.label(clause, column)
        if before == after and before_label == after_label and not within:
            continue
        was = {r.test: r for r in old.cells.get((clause, column), [])}
        now = {r.test: r for r in new.cells.get((clause, column), [])}
        moved = []
        for test in sorted(set(was) | set(now)):
            before_r, after_r = was.get(test), now.get(test)
            if (before_r and before_r.outcome) != (after_r and after_r.outcome):
                note = (after_r.note if after_r else "") or (before_r.note if before_r else "")
                moved.append(
                    TestChange(test, before_r.outcome if before_r else None, after_r.outcome if after_r else None, note)
                )
        if before != after or before_label != after_label or moved:
            changes.append(CellChange(clause, column, before, after, tuple(moved), before_label, after_label))
    return changes


def clause_order(clause: str) -> tuple[int, str]:
    """A sort key that puts clause ids in SPEC's order (C2 before C10)."""
    digits = clause[1:]
    return (int(digits), clause) if digits.isdigit() else (10**6, clause)


def render_text(changes: list[CellChange], old_name: str, new_name: str) -> str:
    if not changes:
        return f"no cell changed between {old_name} and {new_name}"
    worse = sum(c.worse for c in changes)
    coverage = sum(c.coverage_only for c in changes)
    also = f", {coverage} in coverage alone (the same outcome from more or fewer of its tests)" if coverage else ""
    lines = [f"{len(changes)} cells changed between {old_name} and {new_name}, {worse} worse{also}:"]
    for change in changes:
        lines.append(f"  {change.describe()}")
        for t in change.tests:
            note = f": {t.note}" if t.note else ""
            lines.append(f"      {t.test}: {t.old or ABSENT} -> {t.new or ABSENT}{note}")
    return "\n".join(lines)


def render_markdown(changes: list[CellChange], old_name: str, new_name: str) -> str:
    lines = [f"# Changes between `{old_name}` and `{new_name}`", ""]
    if not changes:
        return "\n".join([*lines, "No cell changed.", ""])
    lines += ["| clause | column | before | after | | tests |", "|---|---|---|---|---|---|"]
    for c in changes:
        word = f"**{c.word}**" if c.worse else c.word
        tests = "<br>".join(f"`{t.test}`: {t.old or ABSENT} → {t.new or ABSENT}" for t in c.tests)
        before, after = c.old_label or c.old or ABSENT, c.new_label or c.new or ABSENT
        lines.append(f"| {c.clause} | {c.column} | {before} | {after} | {word} | {tests} |")
    return "\n".join(lines) + "\n"
