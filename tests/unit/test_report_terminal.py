"""The terminal matrix fits a terminal: columns that did not run at all fold into
a line, and a wide matrix breaks into tables by backend, never by character."""

from __future__ import annotations

from harness.contract import CLAUSES
from harness.report import ClauseMatrix, backend_of_column
from harness.report.terminal import render

#: ``make conform`` on a machine without a GPU: 7 cpu columns and their 7 cuda twins.
VARIANTS = [("mp", 1), ("mp", 2), ("mp", 4), ("ray", 1), ("ray", 2), ("ray", 4), ("uni", 1)]


def conform_without_a_gpu() -> ClauseMatrix:
    m = ClauseMatrix()
    for backend, ws in VARIANTS:
        for clause in CLAUSES:
            m.add(clause, f"{backend} ws{ws} cpu", "pass", f"test_{clause.lower()}[{backend}-ws{ws}]")
        for clause in ("C15", "C16", "C17"):
            gpus = "GPU" if ws == 1 else "GPUs"
            m.add(
                clause,
                f"{backend} ws{ws} cuda",
                "not run",
                f"test_{clause.lower()}_nccl",
                f"needs {ws} {gpus}, found 0",
            )
    return m


def table_lines(text: str) -> list[str]:
    """The lines of the tables and of the folds (notes keep their test ids whole, for -k)."""
    return [line for line in text.splitlines() if not line.startswith("  C")]


def fold_of(text: str, kind: str = "cuda") -> str:
    """The folded line of ``kind``, its wrapped lines joined again."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{kind}: "))
    rest = [line.strip() for line in lines[at + 1 :] if line.startswith("    ")]
    return " ".join([lines[at], *rest])


def headers(text: str) -> list[list[str]]:
    """The columns of each table, read off its header line."""
    out = []
    for line in text.splitlines():
        if line.startswith("clause "):
            words = line.split()[1:]
            out.append([" ".join(words[i : i + 3]) for i in range(0, len(words), 3) if words[i] != "summary"])
    return out


def test_columns_that_all_read_not_run_fold_into_one_line_that_says_how_to_run_them() -> None:
    text = render(conform_without_a_gpu(), width=200)
    assert [h for h in headers(text)] == [[f"{b} ws{ws} cpu" for b, ws in VARIANTS]], "no cuda column left"
    fold = fold_of(text)
    assert "not run for every backend" in fold and "needs 1 GPU, found 0" in fold
    assert "`pytest -m gpu` or `make gpu-test`" in fold
    assert all(len(line) <= 200 for line in table_lines(text))


def test_a_matrix_wider_than_the_terminal_breaks_by_backend_and_fits() -> None:
    text = render(conform_without_a_gpu(), width=80)
    tables = headers(text)
    assert len(tables) >= 2
    assert [c for t in tables for c in t] == [f"{b} ws{ws} cpu" for b, ws in VARIANTS], "every column, once, in order"
    for table in tables:
        for backend in {backend_of_column(c) for c in table}:
            whole = [c for c in (f"{b} ws{ws} cpu" for b, ws in VARIANTS) if backend_of_column(c) == backend]
            assert all(c in table for c in whole), f"{backend}'s columns split across tables: {tables}"
    assert all(len(line) <= 80 for line in table_lines(text)), [line for line in text.splitlines() if len(line) > 80]
    assert "clauses:" in text and "C1   blocking call returns one entry per rank" in text


def test_a_column_with_one_cell_that_ran_does_not_fold() -> None:
    m = conform_without_a_gpu()
    m.add("C15", "mp ws2 cuda", "FAIL", "test_c15_nccl[mp-ws2]", "all_reduce gave 3, expected 4")
    text = render(m, width=250)
    assert "mp ws2 cuda" in headers(text)[0]
    assert "C15 [mp ws2 cuda] FAIL: test_c15_nccl[mp-ws2]: all_reduce gave 3, expected 4" in text
    fold = fold_of(text)
    assert "mp ws2)" not in fold and "mp ws2," not in fold


def test_a_run_that_checked_nothing_still_says_so_under_its_folds() -> None:
    m = ClauseMatrix()
    m.add("C15", "mp ws2 cuda", "not run", "test_c15_nccl[mp-ws2]", "needs 2 GPUs, found 0")
    m.not_checked["mp"] = "every test of it was not run: needs 2 GPUs, found 0"
    text = render(m, width=100)
    assert fold_of(text).startswith("cuda: not run for mp (mp ws2): needs 2 GPUs, found 0")
    assert "NOTHING CHECKED for backend 'mp'" in text


def test_a_column_with_a_pass_beside_a_filtered_out_test_does_not_fold_and_reads_pass_1_of_2() -> None:
    m = ClauseMatrix()
    m.add("C1", "mine ws1 cpu", "pass", "test_c1_a[mine-ws1-spawn]")
    m.add("C1", "mine ws1 cpu", "not run", "test_c1_b[mine-ws1-fork]", "filtered out")
    m.filters = ["--harness-sample mine"]
    assert m.outcome("C1", "mine ws1 cpu") == "pass"
    text = render(m, width=100)
    assert headers(text) == [["mine ws1 cpu"]], text
    assert "pass (1 of 2)" in text
    assert "cells: pass 1 (1 of them partly run)" in text
    assert "1 cell partly run: 1 of their tests filtered out of this run (--harness-sample mine)" in text
    assert "make conform-full" in text
