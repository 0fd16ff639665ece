"""Where a run's CPU goes: each isolated test's CPU by phase (its process, the
workers it started), and each pytest run's own, logged where HARNESS_CPU_LOG
names a file (tests/perf/scripts/suite_times.py cpu reads it)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from harness.system import cpu

BURNS = """
import time

import pytest

from harness.conformance import probes


def _burn(worker, seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return worker.rank


@pytest.mark.harness_clause("C1")
def test_burns_in_its_workers(executor, world_size):
    assert executor.collective_rpc(_burn, args=(0.5,)) == list(range(world_size))
"""


def test_a_process_cpu_is_read_from_proc_and_a_gone_one_reads_zero() -> None:
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert cpu.process_cpu_s(os.getpid()) >= 0.15
    assert cpu.process_cpu_s(2**22 + 12345) == 0.0


def test_nothing_is_logged_without_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(cpu.CPU_LOG_ENV, raising=False)
    monkeypatch.setattr(cpu, "_LOG", [])
    monkeypatch.chdir(tmp_path)
    cpu.log_test_cpu("t::x", {"call": 1.0}, {"call": 1.0})
    assert list(tmp_path.iterdir()) == []


def test_a_run_takes_the_log_from_the_environment_so_the_runs_its_tests_start_log_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "cpu.jsonl"
    monkeypatch.setattr(cpu, "_LOG", [])
    monkeypatch.setattr(cpu, "_STARTED", [])
    monkeypatch.setenv(cpu.CPU_LOG_ENV, str(log))
    cpu.run_started()
    # A pytest run that a test starts inherits this environment: without the
    # variable, its CPU is counted once, in the test that started it.
    assert cpu.CPU_LOG_ENV not in os.environ
    cpu.log_test_cpu("t::x", {"call": 1.0}, {"call": 2.0})
    cpu.log_run_cpu()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[0]["test"] == "t::x" and lines[0]["wall"] == {"call": 2.0}
    assert lines[1]["run_cpu"] > 0 and lines[1]["run_wall"] >= 0


@pytest.mark.timeout(300)
def test_each_isolated_test_logs_its_cpu_by_phase_workers_included(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_burns=BURNS)
    log = pytester.path / "cpu.jsonl"
    args = ["--harness-backend", "mp", "--harness-world-size", "2", "--harness-start-method", "fork"]
    os.environ[cpu.CPU_LOG_ENV] = str(log)
    try:
        result = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider")
    finally:
        del os.environ[cpu.CPU_LOG_ENV]
    result.assert_outcomes(passed=1)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    [test] = [line for line in lines if "test" in line]
    [run] = [line for line in lines if "run_cpu" in line]
    assert test["test"].endswith("test_burns_in_its_workers[mp-ws2-fork]")
    assert set(test["cpu"]) == {"setup", "call", "teardown"} == set(test["wall"])
    # Two workers burned 0.5 s each in the call: counted while they still ran.
    assert test["cpu"]["call"] >= 0.9, test
    # The run's own: its process and what it reaped, the test's process and workers among them.
    assert run["run_cpu"] >= 0.9 and run["run_wall"] > 0, run
