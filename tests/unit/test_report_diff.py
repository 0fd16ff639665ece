"""report diff: the cells whose outcome moved between two runs, with the tests
behind each move; worse is any move down from pass (FAIL, not run, declared,
blocked, a cell gone), and a worse cell makes the command exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.report import ClauseMatrix
from harness.report.diff import diff, render_markdown, render_text

COL = "mp ws2 cpu"


def matrix(*cells: tuple[str, str, str, str]) -> ClauseMatrix:
    m = ClauseMatrix()
    for clause, column, outcome, test in cells:
        m.add(clause, column, outcome, test, "why" if outcome != "pass" else "")
    m.state = "finished"
    return m


def test_only_cells_whose_outcome_moved_are_listed_with_the_tests_that_moved() -> None:
    old = matrix(
        ("C1", COL, "pass", "t1"), ("C4", COL, "pass", "t4"), ("C4", COL, "pass", "t4b"), ("C7", COL, "FAIL", "t7")
    )
    new = matrix(
        ("C1", COL, "pass", "t1"), ("C4", COL, "FAIL", "t4"), ("C4", COL, "pass", "t4b"), ("C7", COL, "pass", "t7")
    )
    changes = diff(old, new)
    assert [(c.clause, c.old, c.new, c.worse) for c in changes] == [
        ("C4", "pass", "FAIL", True),
        ("C7", "FAIL", "pass", False),
    ]
    assert [(t.test, t.old, t.new) for t in changes[0].tests] == [("t4", "pass", "FAIL")], "t4b did not move"
    text = render_text(changes, "old.json", "new.json")
    assert "C4 [mp ws2 cpu]: pass -> FAIL (WORSE)" in text and "C7 [mp ws2 cpu]: FAIL -> pass (better)" in text
    assert "| C4 | mp ws2 cpu | pass | FAIL | **worse** |" in render_markdown(changes, "old.json", "new.json")


def test_within_also_lists_a_cell_that_reads_the_same_while_a_test_in_it_moved() -> None:
    old = matrix(("C1", COL, "pass", "t1"), ("C20", COL, "FAIL", "t20"), ("C20", COL, "FAIL", "t20b"))
    new = matrix(("C1", COL, "pass", "t1"), ("C20", COL, "FAIL", "t20"), ("C20", COL, "pass", "t20b"))
    assert diff(old, new) == [], "the cell reads FAIL in both"
    changes = diff(old, new, within=True)
    assert [(c.clause, c.old, c.new) for c in changes] == [("C20", "FAIL", "FAIL")], "C1 moved nowhere"
    assert [(t.test, t.old, t.new) for t in changes[0].tests] == [("t20b", "FAIL", "pass")]


@pytest.mark.parametrize(
    ("before", "after", "worse"),
    [
        ("pass", "not run", True),  # a check that stopped running lost coverage
        ("pass", "declared", True),
        ("pass", "blocked by C4", True),
        ("declared", "pass", False),
        ("not run", "pass", False),
        ("pass", "not applicable", False),
        ("FAIL", "blocked by C4", False),
    ],
)
def test_worse_is_a_move_down_from_checked_and_held(before: str, after: str, worse: bool) -> None:
    (change,) = diff(matrix(("C5", COL, before, "t")), matrix(("C5", COL, after, "t")))
    assert change.worse is worse


def test_a_variant_that_no_longer_ran_is_worse_and_a_new_one_is_not() -> None:
    old = matrix(("C1", COL, "pass", "t1"))
    new = matrix(("C1", "mp ws4 cpu", "pass", "t1w4"))
    changes = {c.column: c for c in diff(old, new)}
    assert changes[COL].worse and changes[COL].new is None
    assert not changes["mp ws4 cpu"].worse


def test_two_runs_of_different_backends_compare_variant_by_variant() -> None:
    old = matrix(("C1", "mp ws2 cpu", "pass", "t1[mp-ws2-fork]"), ("C5", "mp ws2 cpu", "pass", "t5[mp-ws2-fork]"))
    new = matrix(("C1", "pkg:broken ws2 cpu", "pass", "t1[pkg:broken-ws2-fork]"),
                 ("C5", "pkg:broken ws2 cpu", "FAIL", "t5[pkg:broken-ws2-fork]"))  # fmt: skip
    changes = diff(old, new)
    assert [(c.clause, c.old, c.new) for c in changes] == [("C5", "pass", "FAIL")]
    assert [(t.test, t.old, t.new) for t in changes[0].tests] == [("t5[ws2-fork]", "pass", "FAIL")]


def test_the_command_exits_1_on_a_worse_cell_0_on_none_and_2_on_a_file_that_is_no_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new, same = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "same.json"
    old.write_text(json.dumps(matrix(("C4", COL, "pass", "t4")).to_json()))
    new.write_text(json.dumps(matrix(("C4", COL, "FAIL", "t4")).to_json()))
    same.write_text(old.read_text())
    md, html = tmp_path / "d.md", tmp_path / "d.html"
    assert main(["report", "diff", str(old), str(new), "--md", str(md), "--html", str(html)]) == 1
    assert "C4 [mp ws2 cpu]: pass -> FAIL (WORSE)" in capsys.readouterr().out
    assert "**worse**" in md.read_text() and 'data-word="worse"' in html.read_text()
    assert main(["report", "diff", str(old), str(same)]) == 0
    assert "no cell changed" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["report", "diff", str(old), str(tmp_path / "bad.json")]) == 4
    err = capsys.readouterr().err
    assert "bad.json: not a JSON report" in err and "line 1" in err
    (tmp_path / "other.json").write_text('{"benchmark": 1}')
    assert main(["report", "diff", str(tmp_path / "other.json"), str(old)]) == 4
    assert "other.json: not a harness report" in capsys.readouterr().err


def test_a_cell_that_went_from_partly_run_to_fully_run_changed_coverage_not_verdict(tmp_path: Path) -> None:
    sampled = matrix(("C1", COL, "pass", "t1"), ("C4", COL, "pass", "t4"))
    sampled.add("C1", COL, "not run", "t1b", "filtered out")
    whole = matrix(("C1", COL, "pass", "t1"), ("C1", COL, "pass", "t1b"), ("C4", COL, "pass", "t4"))
    for old, new, before, after in (
        (sampled, whole, "pass (1 of 2)", "pass"),
        (whole, sampled, "pass", "pass (1 of 2)"),
    ):
        changes = diff(old, new)
        assert [(c.clause, c.old, c.new, c.worse, c.word) for c in changes] == [
            ("C1", "pass", "pass", False, "coverage")
        ]
        text = render_text(changes, "a.json", "b.json")
        assert "1 cells changed between a.json and b.json, 0 worse, 1 in coverage alone" in text
        assert f"C1 [mp ws2 cpu]: {before} -> {after} (coverage, not verdict)" in text
    sampled.write(str(tmp_path / "sampled.json"), None)
    whole.write(str(tmp_path / "whole.json"), None)
    assert main(["report", "diff", str(tmp_path / "whole.json"), str(tmp_path / "sampled.json")]) == 0
