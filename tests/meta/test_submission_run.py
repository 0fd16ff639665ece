"""Real runs made into submissions and diffs: `conform --submission` writes
every piece, `verify` finds a broken backend not conformant and rejects a report
changed by one byte, and `report diff` between a broken backend's run and
`mp`'s lists exactly the cells that differ and exits 1."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.report import submission as sub

pytestmark = [pytest.mark.timeout(300), pytest.mark.harness_isolated]
ROOT = Path(__file__).resolve().parents[2]
#: C1 (the broken backend puts results in arrival order, which C3's checks meet too).
SCOPE = ["--world-size", "2", "--start-method", "fork", "--clause", "C1,C3", "-m", "not gpu", "--jobs", "2"]


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True, timeout=280, check=False
    )


def test_a_broken_backends_submission_holds_every_piece_and_is_not_conformant_and_a_changed_byte_is_caught(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "submission"
    run = harness("conform", "--backend", "tests.meta.broken:arrival_order", *SCOPE, "--submission", str(folder))
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert {"e2e.log", "junit.xml", "report.json", "report.html", "submission.json", "SHA256SUMS"} <= names
    logs = [n for n in names if n.startswith("tests/")]
    cases = ET.parse(folder / "junit.xml").getroot().iter("testcase")
    assert len(logs) == len(list(cases)) >= 3, f"one log per test: {logs}"
    assert "harness conformance" in (folder / "e2e.log").read_text(), "the whole run's log, matrix included"
    manifest = json.loads((folder / "submission.json").read_text())
    assert manifest["factory"] == "tests.meta.broken:arrival_order" and "--submission" in manifest["command"]
    verdict = sub.verify(folder)
    assert verdict.verdict == "not conformant"
    assert any(r.startswith("C1 [tests.meta.broken:arrival_order ws2 cpu] FAIL") for r in verdict.reasons), verdict
    checked = harness("verify", str(folder))
    assert checked.returncode == 1 and checked.stdout.startswith("not conformant:"), checked.stdout
    data = bytearray((folder / "report.json").read_bytes())
    data[data.index(b"FAIL")] = ord("f")  # one byte
    (folder / "report.json").write_bytes(bytes(data))
    assert sub.verify(folder).reasons == ["report.json does not match its digest in SHA256SUMS: changed after the run"]


def test_report_diff_between_a_broken_backend_and_mp_lists_exactly_the_cells_that_differ(tmp_path: Path) -> None:
    runs = {}
    for name, backend in (("mp", "mp"), ("broken", "tests.meta.broken:arrival_order")):
        runs[name] = tmp_path / f"{name}.json"
        harness("conform", "--backend", backend, *SCOPE, "--report-json", str(runs[name]))
    outcomes = {
        name: {
            (cl, col.split(" ", 1)[1]): cell["outcome"]
            for cl, cols in json.loads(path.read_text())["clauses"].items()
            for col, cell in cols.items()
        }
        for name, path in runs.items()
    }
    cells = sorted(set(outcomes["mp"]) | set(outcomes["broken"]), key=lambda k: (int(k[0][1:]), k[1]))
    mp, broken = outcomes["mp"], outcomes["broken"]
    differ = [k for k in cells if mp.get(k) != broken.get(k)]
    assert ("C1", "ws2 cpu") in differ, outcomes
    html = tmp_path / "diff.html"
    done = harness("report", "diff", str(runs["mp"]), str(runs["broken"]), "--html", str(html))
    assert done.returncode == 1, done.stdout + done.stderr
    listed = [line.strip() for line in done.stdout.splitlines() if line.startswith("  C")]
    expected = [
        f"{cl} [{col}]: {mp.get((cl, col), 'absent')} -> {broken.get((cl, col), 'absent')} (WORSE)"
        for cl, col in differ
    ]
    assert listed == expected, done.stdout
    assert 'data-cell="C1 [ws2 cpu]" data-word="worse"' in html.read_text()
