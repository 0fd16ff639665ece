"""Choosing what runs, as a user meets it: backends named wrongly, factories that
fail, clauses by id, options that live beside a project's own, reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

SUITE = """
import pytest
from harness.conformance import probes

@pytest.mark.harness_clause("C1")
def test_c1(executor, world_size):
    assert executor.collective_rpc(probes.rank) == list(range(world_size))

@pytest.mark.harness_clause("C4")
def test_c4(executor):
    assert executor.collective_rpc(probes.rank, non_block=True).result() == [0]

@pytest.mark.harness_clause("C14")
def test_c14(executor):
    pass
"""

FACTORIES = """
from harness.executors.uniproc import create as _create

def raises(config):
    raise RuntimeError("cannot start: no such device")

def forty_two(config):
    return 42

not_callable = 7

def fine(config):
    return _create(config)
"""

UNI_1 = ("--harness-world-size", "1", "--harness-start-method", "spawn", "-p", "no:cacheprovider")


@pytest.mark.parametrize(
    ("spec", "env", "message"),
    [
        ("nosuch", False, "ERROR: unknown backend 'nosuch' from the command line: known backends are*"),
        ("nosuchmod:create", False, "ERROR: backend 'nosuchmod:create' from the command line: cannot import*"),
        ("factories:nosuch", False, "ERROR: backend 'factories:nosuch' from the command line: module*no attribute*"),
        ("factories:not_callable", False, "ERROR: backend 'factories:not_callable' from the command line: 7 is not*"),
        ("garbage", True, "ERROR: unknown backend 'garbage' from the environment variable HARNESS_BACKEND*"),
    ],
)
def test_a_bad_backend_is_one_clear_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, spec: str, env: bool, message: str
) -> None:
    pytester.makepyfile(factories=FACTORIES, test_a=SUITE, test_b=SUITE.replace("def test_", "def test_b_"))
    if env:
        monkeypatch.setenv("HARNESS_BACKEND", spec)
        result = pytester.runpytest_subprocess(*UNI_1)
    else:
        result = pytester.runpytest_subprocess("--harness-backend", spec, *UNI_1)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert len(result.stderr.lines) <= 3, "expected one message, got:\n" + "\n".join(result.stderr.lines)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_failing_factory_is_reported_once_per_variant_with_its_traceback(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(factories=FACTORIES, test_a=SUITE)
    result = pytester.runpytest_subprocess("--harness-backend", "factories:raises", *UNI_1, "-rs")
    result.assert_outcomes(errors=1, skipped=2)
    assert result.stdout.str().count("cannot start: no such device") >= 2  # the error, then the skips' reason
    result.stdout.fnmatch_lines(["*raise RuntimeError(*cannot start: no such device*"])  # its traceback
    result.stdout.fnmatch_lines(["*the factory failed for factories:raises-ws1-spawn in test_c1*"])


def test_a_factory_that_returns_no_executor_is_told_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(factories=FACTORIES, test_a=SUITE)
    result = pytester.runpytest_subprocess("--harness-backend", "factories:forty_two", *UNI_1)
    result.stdout.fnmatch_lines(["*the factory returned int 42, which has no collective_rpc*"])
    assert "AttributeError" not in result.stdout.str()


def test_clauses_are_selected_by_exact_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(factories=FACTORIES, test_a=SUITE)
    result = pytester.runpytest_subprocess("--harness-backend", "factories:fine", *UNI_1, "--clause", "C1,C4", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*test_c14*PASSED*")
    bad = pytester.runpytest_subprocess("--harness-backend", "uni", *UNI_1, "--clause", "C1,c4")
    bad.stderr.fnmatch_lines(["ERROR: Invalid clause 'c4' from the command line: expected one of C1..C25"])


SAMPLED_SUITE = """
import pytest
from harness.conformance import probes

@pytest.mark.harness_clause("C1")
def test_c1_blocking_call_returns_the_ranks(executor, world_size):
    assert executor.collective_rpc(probes.rank) == list(range(world_size))

@pytest.mark.harness_clause("C1")
def test_c1_not_in_the_sample(executor, world_size):
    assert executor.collective_rpc(probes.rank) == list(range(world_size))
"""


def test_a_sampled_variant_runs_one_test_of_each_clause_and_the_others_run_every_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(factories=FACTORIES, test_a=SAMPLED_SUITE)
    args = ("--harness-backend", "factories:fine", "--harness-world-size", "1", "-p", "no:cacheprovider", "-v")
    result = pytester.runpytest_subprocess(
        *args, "--harness-start-method", "fork,spawn", "--harness-sample", "factories:fine/spawn"
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines_random(
        [
            "*test_c1_blocking_call_returns_the_ranks?factories:fine-ws1-fork? PASSED*",
            "*test_c1_not_in_the_sample?factories:fine-ws1-fork? PASSED*",
            "*test_c1_blocking_call_returns_the_ranks?factories:fine-ws1-spawn? PASSED*",
            "*pass (3 of 4)*",
            "*1 cell partly run: 1 of their tests filtered out of this run (--harness-sample factories:fine/spawn)*",
        ]
    )
    result.stdout.no_fnmatch_line("*test_c1_not_in_the_sample?factories:fine-ws1-spawn? PASSED*")
    bad = pytester.runpytest_subprocess(*args, "--harness-sample", "factories:fine/thread")
    bad.stderr.fnmatch_lines(["ERROR: Invalid sample selector 'factories:fine/thread' from the command line: *"])
    other = pytester.runpytest_subprocess(*args, "--harness-sample", "mp")
    other.stderr.fnmatch_lines(["ERROR: Invalid sample selector 'mp' from the command line: 'mp' is not a backend*"])
    # A project's ini may name backends a run does not have (this project's does: mp's):
    # they are not this run's, and every test runs.
    pytester.makeini("[pytest]\nharness_sample = mp/spawn\n")
    project = pytester.runpytest_subprocess(*args, "--harness-start-method", "spawn")
    project.assert_outcomes(passed=2)


def test_a_projects_own_backend_option_keeps_working(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_addoption(parser):
            parser.addoption("--backend", default="theirs")

        def pytest_report_header(config):
            return "their backend: " + config.getoption("backend")
        """
    )
    pytester.makepyfile(factories=FACTORIES, test_a=SUITE)
    result = pytester.runpytest_subprocess("--backend", "postgres", "--harness-backend", "factories:fine", *UNI_1)
    result.stdout.fnmatch_lines(["their backend: postgres"])
    result.assert_outcomes(passed=3)


def test_pytest_timeouts_timeout_is_honoured_for_isolated_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_slow="""
        import time
        import pytest

        @pytest.mark.harness_clause("C1")
        @pytest.mark.timeout(300)
        def test_slow(executor):
            time.sleep(60)
        """
    )
    result = pytester.runpytest_subprocess("--harness-backend", "uni", *UNI_1, "--timeout", "3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 3 s*"])


def test_reports_are_written_when_nothing_ran_and_their_folder_is_checked_first(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(factories=FACTORIES, test_a=SUITE)
    report = pytester.path / "report.json"
    result = pytester.runpytest_subprocess(
        "--harness-backend", "uni", *UNI_1, "-k", "nothing_matches", "--report-json", str(report)
    )
    assert result.ret != 0
    data = json.loads(report.read_text())
    assert data["not_checked"] == {"uni": "no test of it was selected (-k, -m or the paths given matched none)"}
    assert data["settings"]["spec"]
    missing = os.path.join(str(pytester.path), "no", "such", "folder", "r.json")
    bad = pytester.runpytest_subprocess("--harness-backend", "uni", *UNI_1, "--report-json", missing)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["ERROR: Invalid --harness-report-json '*r.json': the folder '*folder' does not exist"])


def _conform(cwd: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", "conform", "--backend", "uni", "--world-size", "1", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_conform_ignores_the_current_folders_pytest_configuration(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --cov=nothing --no-such-option\nfilterwarnings = error\n")
    (tmp_path / "conftest.py").write_text("raise RuntimeError('this folder's conftest is not the suite's')\n")
    done = _conform(str(tmp_path), "--clause", "C1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "C1                 pass" in done.stdout


def test_conform_passes_pytest_arguments_through_and_names_each_test(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    done = _conform(str(tmp_path), "--clause", "C1", "-x", f"--junitxml={junit}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "test_c1_blocking_call_returns_one_entry_per_rank[uni-ws1-spawn] PASSED" in done.stdout
    text = junit.read_text()
    assert 'name="harness spec"' in text and "test_c1_blocking_call" in text, text[:2000]
