"""A loaded machine may make the suite slower, never make a correct backend FAIL:
a sample of the suite (every clause once) beside CPU hogs, two per core, gives
`mp` the verdicts it gets on a quiet machine (pass, every one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.conformance.sample import SAMPLE
from harness.contract import CLAUSES
from harness.report import FILTERED_OUT

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.harness_exclusive
@pytest.mark.timeout(1200)
def test_beside_cpu_hogs_mp_gets_the_verdicts_of_a_quiet_machine(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(2 * (os.cpu_count() or 1))
    ]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "harness", "conform", "--backend", "mp", "--world-size", "2",
             "--start-method", "fork", "-m", "not gpu", "--sample", "-q",
             "--report-json", str(report)],
            cwd=ROOT, capture_output=True, text=True, timeout=1100, check=False,
        )  # fmt: skip
    finally:
        for hog in hogs:
            os.killpg(hog.pid, signal.SIGKILL)
            hog.wait()
    output = done.stdout + done.stderr
    assert report.exists(), output[-5000:]
    clauses = json.loads(report.read_text())["clauses"]
    sampled = {f"C{name[1:].split('_')[0]}" for name in SAMPLE}
    assert sampled == set(CLAUSES), "the sample must hold every clause"
    # Each clause's sampled tests (its others were filtered out of this run).
    ran = {
        clause: [t for t in cells["mp ws2 cpu"]["tests"] if t["note"] != FILTERED_OUT]
        for clause, cells in clauses.items()
    }
    assert {c for c, tests in ran.items() if tests} == sampled, f"clauses with no test run: {ran}"
    not_passed = {c: t for c, tests in ran.items() for t in tests if t["outcome"] != "pass"}
    assert not not_passed, f"beside {len(hogs)} CPU hogs: {not_passed}\n{output[-3000:]}"
    assert done.returncode == 0, output[-5000:]
