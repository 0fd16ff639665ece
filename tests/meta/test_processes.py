"""The suite's view of processes: C23 in a network namespace, C13 with nothing to look at, start-method variants."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness.conformance import _netns

ROOT = Path(__file__).resolve().parents[2]


def conform(backend: str, k: str, tmp_path: Path, world_size: int = 2, start_method: str = "spawn") -> dict[str, Any]:
    report = tmp_path / "report.json"
    argv = [sys.executable, "-m", "harness", "conform", "--backend", backend, "--world-size", str(world_size)]
    argv += ["--start-method", start_method, "-k", k, "--report-json", str(report), "--timeout", "120"]
    proc = subprocess.run(
        argv,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert report.exists(), f"no report written; output:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    data: dict[str, Any] = json.loads(report.read_text())
    data["output"] = proc.stdout
    return data


def outcomes(report: dict[str, Any], clause: str) -> list[str]:
    return [cell["outcome"] for cell in report["clauses"].get(clause, {}).values()]


@pytest.mark.timeout(600)
def test_gloo_left_unpinned_fails_c23_where_the_host_name_is_not_loopback(tmp_path: Path) -> None:
    why = _netns.unavailable()
    if why:
        pytest.skip(f"no network namespace here ({why}): C23 cannot look past this machine's host name")
    report = conform("tests.meta.broken:unpinned_gloo", "c23_", tmp_path)
    assert "FAIL" in outcomes(report, "C23"), f"C23 is {outcomes(report, 'C23')}, expected FAIL"
    assert "in a network namespace where the host name" in report["output"], report["output"][-3000:]


@pytest.mark.timeout(600)
def test_c13_is_not_applicable_where_the_ranks_run_in_the_caller(tmp_path: Path) -> None:
    report = conform("uni", "c13_", tmp_path, world_size=1)
    assert outcomes(report, "C13") == ["not applicable"], f"C13 is {outcomes(report, 'C13')} for uni"


def test_each_backend_gets_a_variant_per_start_method_it_declares(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        backends=textwrap.dedent(
            """
            from harness.executors.mp import create as _mp

            def declared(config):
                return _mp(config)

            declared.start_methods = ("spawn", "forkserver")

            def undeclared(config):
                return _mp(config)
            """
        ),
        test_x="def test_x(executor):\n    pass\n",
    )
    result = pytester.runpytest_subprocess(
        "--collect-only",
        "-q",
        "--backend",
        "backends:declared,backends:undeclared,uni,mp",
        "--world-size",
        "1",
        "--start-method",
        "spawn,fork,forkserver",
    )
    ids = {line.split("[", 1)[1].rstrip("]") for line in result.outlines if "test_x[" in line}
    assert ids == {
        "backends:declared-ws1-spawn",
        "backends:declared-ws1-forkserver",
        "backends:undeclared-ws1-spawn",
        "backends:undeclared-ws1-fork",
        "backends:undeclared-ws1-forkserver",
        "uni-ws1-spawn",
        "mp-ws1-spawn",
        "mp-ws1-fork",
        "mp-ws1-forkserver",
    }, result.outlines


LEAVES_PROCESSES = """
import subprocess, sys
import pytest

@pytest.mark.harness_distributed
def test_leaves_a_sleeper():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)  # left-behind"])

@pytest.mark.harness_distributed
def test_leaves_one_that_exits_soon():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
"""


@pytest.mark.timeout(120)
def test_a_process_the_test_left_running_fails_it_and_is_named_and_killed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaves=LEAVES_PROCESSES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--harness-jobs", "1")
    out = "\n".join(result.outlines)
    # The sleeper's test errors at teardown; one that exits within the settle
    # time, as a fork server does once its parent is gone, is no leak: both pass.
    result.assert_outcomes(passed=2, errors=1)
    assert "ERROR test_leaves.py::test_leaves_a_sleeper" in out, out
    assert "processes left running" in out and "# left-behind" in out, out
    left = subprocess.run(["pgrep", "-f", "# left-behind"], capture_output=True, text=True, check=False)
    assert not left.stdout.strip(), f"the left-behind process still runs: {left.stdout}"


def test_by_default_a_backends_first_start_method_runs_at_every_world_size_and_the_others_at_one(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        backends=textwrap.dedent(
            """
            from harness.executors.mp import create as _mp

            def forkserver_first(config):
                return _mp(config)

            forkserver_first.start_methods = ("forkserver", "spawn")

            def no_two(config):
                return _mp(config)

            no_two.world_sizes = (1, 4)
            """
        ),
        test_x="def test_x(executor):\n    pass\n",
    )

    def ids(*args: str) -> set[str]:
        result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", *args)
        return {line.split("[", 1)[1].rstrip("]") for line in result.outlines if "test_x[" in line}

    assert ids("--backend", "backends:forkserver_first,backends:no_two,uni", "--world-size", "1,2,4") == {
        "backends:forkserver_first-ws1-forkserver",
        "backends:forkserver_first-ws2-forkserver",
        "backends:forkserver_first-ws4-forkserver",
        "backends:forkserver_first-ws2-spawn",
        # Declaring nothing means every start method, spawn first; 2 is not a size it runs: the next one is.
        "backends:no_two-ws1-spawn",
        "backends:no_two-ws4-spawn",
        "backends:no_two-ws4-fork",
        "backends:no_two-ws4-forkserver",
        "uni-ws1-spawn",
    }
    # Start methods named on the command line each run at every world size.
    assert ids("--backend", "backends:forkserver_first", "--world-size", "1,2", "--start-method", "spawn") == {
        "backends:forkserver_first-ws1-spawn",
        "backends:forkserver_first-ws2-spawn",
    }


def test_a_module_a_backend_preloads_is_imported_once_for_all_its_test_processes(tmp_path: Path) -> None:
    marker = tmp_path / "imported-by.txt"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "conform",
            "--backend",
            "tests.meta.preloaded:create",
            "--world-size",
            "1",
            "--start-method",
            "fork",
            "-m",
            "not gpu",
            "-k",
            "c1_ or c3_",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "HARNESS_PRELOAD_MARKER": str(marker)},
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "passed" in proc.stdout, proc.stdout[-2000:]
    importers = marker.read_text().split()
    # One import, in the suite's own process, not one per test process.
    assert len(importers) == 1, f"imported by {importers}"
