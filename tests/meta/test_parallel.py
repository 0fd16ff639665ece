"""Isolated tests side by side (``--harness-jobs``), and the pytest process's torch.

Each test still runs in a process of its own; these check what running them
at once must not change: exclusive tests run alone, a variant's first test
ends before its next one starts, -x stops the run and takes what still runs
along, and a test process forked after pytest's own process used torch still
computes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from harness.conformance._checks import wait_until
from tests.meta.test_plugin import _tagged

# Each test writes when it ran; the run's tests are compared afterwards.
INTERVALS = """
import json, os, time
import pytest

def _ran(name, seconds):
    start = time.time()
    time.sleep(seconds)
    with open(os.path.join(os.environ["INTERVALS"], name), "w") as f:
        json.dump([start, time.time()], f)

@pytest.mark.harness_distributed
@pytest.mark.parametrize("i", range(4))
def test_waits(i):
    _ran(f"waits{i}", 1.5)

@pytest.mark.harness_distributed
@pytest.mark.harness_exclusive
def test_alone():
    _ran("alone", 1.0)

@pytest.mark.harness_distributed
@pytest.mark.parametrize("i", range(2))
def test_more(i):
    _ran(f"more{i}", 1.5)
"""


def _intervals(folder: Path) -> dict[str, tuple[float, float]]:
    return {p.name: tuple(json.loads(p.read_text())) for p in folder.iterdir()}  # type: ignore[misc]


def most_at_once(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals running at one instant (an end before a start at the same instant).
    Not the most intervals that overlap one: a long test that overlaps two which
    ran one after the other overlaps both, with never three at once."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def test_the_count_of_tests_at_once_is_of_one_instant() -> None:
    # The intervals of a run with --harness-jobs 3 that the overlap count read as 4.
    ran = [(834.7, 836.2), (834.8, 836.3), (834.82, 836.32), (836.30, 837.8)]
    assert most_at_once(ran) == 3
    assert most_at_once([(0.0, 1.0), (1.0, 2.0)]) == 1
    assert most_at_once([(0.0, 2.0), (1.0, 3.0), (1.5, 1.6)]) == 3


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("jobs", ["1", "3"])
def test_tests_overlap_up_to_jobs_and_an_exclusive_test_runs_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jobs: str
) -> None:
    monkeypatch.setenv("INTERVALS", str(tmp_path))
    pytester.makepyfile(test_times=INTERVALS)
    result = pytester.runpytest_subprocess("--harness-jobs", jobs, "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=7)
    ran = _intervals(tmp_path)
    assert len(ran) == 7
    names = sorted(ran)
    at_once = most_at_once(ran.values())
    if jobs == "1":
        assert at_once == 1, f"with --harness-jobs 1, tests overlapped: {ran}"
    else:
        assert 2 <= at_once <= 3, f"with --harness-jobs 3, at most 3 tests at once, and some at once: {ran}"
    others = [n for n in names if n != "alone"]
    assert not any(_overlap(ran["alone"], ran[n]) for n in others), f"the exclusive test ran beside another: {ran}"
    # Collection order holds across the exclusive test: what precedes it ended before it began.
    assert all(ran[f"waits{i}"][1] <= ran["alone"][0] for i in range(4))
    assert all(ran["alone"][1] <= ran[f"more{i}"][0] for i in range(2))
    out = result.stdout.str()
    for name in ("test_waits[0]", "test_alone", "test_more[1]"):
        assert f"test_times.py::{name} PASSED" in out, f"{name} is not reported passed:\n{out}"


STOPS = """
import time
import pytest

@pytest.mark.harness_distributed
def test_fails_soon():
    time.sleep(0.5)
    assert False, "the first failure"

@pytest.mark.harness_distributed
@pytest.mark.parametrize("i", range(2))
def test_sleeps_long(i):
    time.sleep(120)
"""


@pytest.mark.timeout(120)
def test_x_stops_the_run_and_takes_the_tests_still_running_along(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = os.urandom(8).hex()
    monkeypatch.setenv("HARNESS_META_TAG", tag)
    pytester.makepyfile(test_stops=STOPS)
    start = time.monotonic()
    result = pytester.runpytest_subprocess("--harness-jobs", "3", "-x", "-p", "no:cacheprovider")
    took = time.monotonic() - start
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stopping after 1 failures*"])
    assert took < 60, f"-x waited {took:.0f} s for the tests still running"
    # The run's reaper may still be at work for a moment after pytest exits.
    assert wait_until(lambda: not _tagged(tag), 15), f"processes of the run left behind: {sorted(_tagged(tag))}"


TORCH_AFTER_THE_PARENT_USED_IT = """
import os
import pytest
import torch

def test_in_pytests_own_process():
    x = torch.randn(1500, 1500)
    assert (x @ x).shape == (1500, 1500)  # a parallel op in the process that forks the tests

@pytest.mark.harness_distributed
def test_in_a_forked_process():
    x = torch.randn(1500, 1500)
    assert (x @ x).shape == (1500, 1500)
    assert torch.get_num_threads() == int(os.environ["EXPECTED_THREADS"])
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_test_process_computes_with_torch_after_pytests_own_process_did(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, jobs: str
) -> None:
    # Not imported here: pytester drops the modules a test imported, and torch
    # cannot be imported twice in one process.
    probe = "import torch; print(torch.get_num_threads())"
    threads = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    monkeypatch.setenv("EXPECTED_THREADS", threads.strip())
    pytester.makepyfile(test_torch=TORCH_AFTER_THE_PARENT_USED_IT)
    result = pytester.runpytest_subprocess("--harness-jobs", jobs, "--harness-timeout", "60", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize(("where", "value"), [("--harness-jobs", "0"), ("HARNESS_JOBS", "many")])
def test_a_bad_job_count_is_a_usage_error_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str, value: str
) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    if where.startswith("--"):
        result = pytester.runpytest_subprocess(where, value)
        origin = "the command line"
    else:
        monkeypatch.setenv(where, value)
        result = pytester.runpytest_subprocess()
        origin = f"the environment variable {where}"
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*Invalid job count '{value}' from {origin}: expected an integer >= 1 or 'auto'*"])


MIXED = {
    "a/test_first.py": """
import pytest

@pytest.fixture(scope="module")
def shared():
    yield 1

def test_in_process(shared):
    assert shared == 1

@pytest.mark.harness_isolated
def test_isolated_beside_it():
    pass
""",
    "a/test_second.py": """
import pytest

@pytest.mark.harness_isolated
def test_isolated_in_another_module():
    pass
""",
    "b/test_third.py": """
def test_in_process_in_another_folder():
    pass
""",
}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_tests_after_isolated_ones_start_clean_whatever_ran_before(pytester: pytest.Pytester, jobs: str) -> None:
    for name, text in MIXED.items():
        path = pytester.path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    result = pytester.runpytest_subprocess("--harness-jobs", jobs, "-p", "no:cacheprovider", "a", "b")
    result.assert_outcomes(passed=4)
