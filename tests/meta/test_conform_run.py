"""`python -m harness conform` as a backend implementer runs it: each failure
shown as its test ends, ids that paste into ``-k``, reasons that are the
reasons, and a run cut short by a signal that keeps what it found and leaves
no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.conformance._checks import wait_until
from tests.meta.test_interrupts import _AS_FROM_A_SHELL, _described
from tests.meta.test_plugin import _kill_tagged, _tagged

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]


def _conform(args: list[str], tmp_path: Path) -> tuple[int, str, dict[str, Any]]:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "conform", *args, "-m", "not gpu", "--report-json", str(report)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    output = done.stdout + done.stderr
    return done.returncode, output, json.loads(report.read_text()) if report.exists() else {}


BROKEN = ["--backend", "tests.meta.broken:list_of_futures", "--world-size", "2", "--start-method", "spawn"]


def test_each_failure_is_printed_when_its_test_ends_with_an_id_that_pastes_into_k(tmp_path: Path) -> None:
    code, output, report = _conform(
        [*BROKEN, "--jobs", "1", "-k", "c4_non_block"],
        tmp_path,
    )
    assert code == 1, output
    tests = [t["test"] for cell in report["clauses"]["C4"].values() for t in cell["tests"] if t["outcome"] == "FAIL"]
    # Two tests that differ only in a parameter: each id names its own.
    assert len(tests) == 2 and len(set(tests)) == 2, tests
    summary_at = output.index("harness conformance: clause x backend")
    for test in tests:
        printed = [line for line in output[:summary_at].splitlines() if line.startswith("FAIL C4 [") and test in line]
        assert printed, f"no failure line for {test} before the summary:\n{output[:summary_at]}"
        listed = subprocess.run(
            [sys.executable, "-m", "pytest", "--pyargs", "harness.conformance", "-p", "no:cacheprovider",
             *(f"--harness-{a[2:]}" if a.startswith("--") else a for a in BROKEN), "--collect-only", "-q", "-k", test],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        selected = [line for line in listed.stdout.splitlines() if "::" in line]
        assert len(selected) == 1 and selected[0].endswith(f"::{test}"), f"-k {test!r} selected {selected}"


def test_a_run_of_declared_clauses_only_says_so(tmp_path: Path) -> None:
    code, output, report = _conform(
        ["--backend", "mp", "--world-size", "2", "--start-method", "fork", "--clause", "C12", "--declare", "C12"],
        tmp_path,
    )
    assert code != 0, output
    assert report["not_checked"]["mp"].startswith(
        "every selected clause was declared unsupported or not applicable: C12 declared"
    ), report["not_checked"]
    assert "no test of it was selected" not in output


def test_conform_help_lists_every_option_it_passes_on() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness", "conform", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    for option in ("--jobs", "--timeout", "--clause", "--declare", "--report-json", "--start-method"):
        assert option in done.stdout, f"{option} missing from conform --help"


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"]
)
def test_a_signal_to_conform_mid_run_keeps_a_partial_report_and_leaves_no_process(tmp_path: Path, signum: int) -> None:
    report = tmp_path / "report.json"
    tag = os.urandom(8).hex()
    env = dict(os.environ, HARNESS_META_TAG=tag)
    # Tests of a few seconds each, one at a time: the signal lands mid-run.
    args = ["--backend", "mp", "--world-size", "2", "--start-method", "fork", "--jobs", "1", "--clause", "C7,C8,C9"]
    run = subprocess.Popen(
        [sys.executable, "-c", _AS_FROM_A_SHELL, sys.executable, "-m", "harness", "conform", *args,
         "-m", "not gpu", "--report-json", str(report)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:

        def some_cells() -> bool:
            try:
                return bool(json.loads(report.read_text())["clauses"])
            except (OSError, ValueError, KeyError):
                return False

        assert wait_until(some_cells, 180), "no report with a cell was written as the run went"
        time.sleep(1.0)  # well into the next test
        run.send_signal(signum)
        out, err = run.communicate(timeout=90)
        gone = wait_until(lambda: not _tagged(tag), 15)
        left = _described(_tagged(tag))
    finally:
        _kill_tagged(tag)
        if run.poll() is None:
            run.kill()
            run.wait(30)
    assert gone, f"processes of the run left after {signal.Signals(signum).name}: " + "; ".join(left)

    def interrupted() -> bool:
        return json.loads(report.read_text())["run"].startswith("interrupted")

    # After SIGKILL, pytest ends on its own (SIGINT from the kernel): give it time to write.
    assert wait_until(interrupted, 30), f"report: {report.read_text()[:2000]}"
    assert any(cell["outcome"] == "pass" for cells in json.loads(report.read_text())["clauses"].values()
               for cell in cells.values())  # fmt: skip
    if signum != signal.SIGKILL:
        assert run.returncode == pytest.ExitCode.INTERRUPTED, (run.returncode, out[-3000:], err[-3000:])
        assert "Traceback" not in err, err[-3000:]
        assert "harness conformance: clause x backend" in out, out[-3000:]
