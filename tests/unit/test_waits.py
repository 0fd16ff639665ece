"""The suite's own waits: they wait on events and stretch with the machine's load,
so that a busy machine makes the suite slower, never a correct backend FAIL."""

from __future__ import annotations

import time

import pytest

from harness.conformance._checks import bounded_while_progressing, wait_while_progressing
from harness.system import load


def test_a_wait_goes_on_while_progress_is_made_past_its_stall_bound() -> None:
    start = time.monotonic()

    def progress() -> int:
        # A new value every 0.1 s, for 0.8 s: each gap well inside the 0.3 s stall bound.
        return min(int((time.monotonic() - start) / 0.1), 8)

    done = wait_while_progressing(lambda: time.monotonic() - start > 0.8, progress, stall_s=0.3, limit_s=10)
    assert done


def test_a_wait_ends_once_progress_stands_still_for_its_stall_bound() -> None:
    start = time.monotonic()
    done = wait_while_progressing(lambda: False, lambda: "stopped", stall_s=0.3, limit_s=10)
    took = time.monotonic() - start
    assert not done
    assert 0.3 <= took < 2, f"gave up after {took:.2f} s, expected about 0.3 s (the stall bound), not 10 s"


def test_a_wait_that_keeps_progressing_still_ends_at_its_limit() -> None:
    start = time.monotonic()
    done = wait_while_progressing(lambda: False, time.monotonic, stall_s=5, limit_s=0.5)
    took = time.monotonic() - start
    assert not done
    assert 0.5 <= took < 2.5, f"gave up after {took:.2f} s, expected about its 0.5 s limit"


@pytest.mark.parametrize(("load_per_cpu", "scale"), [(0.2, 1.0), (1.0, 1.0), (2.5, 2.5), (6.0, 6.0), (40.0, 6.0)])
def test_the_suite_s_own_waits_scale_with_the_load_per_cpu_at_most_six_times(load_per_cpu: float, scale: float) -> None:
    assert load.load_scale(load_per_cpu) == scale


@pytest.mark.parametrize(
    ("loads", "scale"),
    [((0.2, 0.5, 0.9), 1.0), ((2.0, 0.5, 0.3), 6.0), ((0.4, 1.5, 0.8), 6.0), ((0.1, 0.2, 1.2), 6.0), ((), 1.0)],
)
def test_a_start_up_bound_gets_the_whole_stretch_once_the_machine_was_loaded_in_the_last_15_minutes(
    loads: tuple[float, ...], scale: float
) -> None:
    """A start outlasts the 1-minute average read at its beginning: any load past
    the CPUs over 1, 5 or 15 minutes stretches it six times, none leaves it exact."""
    assert load.start_up_scale(loads) == scale


def test_a_call_that_keeps_making_progress_returns_its_result_past_the_stall_bound() -> None:
    steps: list[int] = []

    def slow_but_steady() -> str:
        for i in range(8):
            time.sleep(0.1)
            steps.append(i)
        return "done"

    assert bounded_while_progressing(slow_but_steady, lambda: len(steps), 0.3, 10, "the call") == "done"


def test_a_call_that_stops_fails_after_the_stall_bound_naming_where_it_stood() -> None:
    steps: list[int] = []

    def stops_after_three() -> None:
        steps.extend(range(3))
        time.sleep(30)

    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"the call did not return within \d+ s: it stood at '3 of 300'"):
        bounded_while_progressing(stops_after_three, lambda: f"{len(steps)} of 300", 0.3, 10, "the call")
    assert time.monotonic() - start < 3


def test_a_call_that_raises_raises_in_the_test() -> None:
    def fails() -> None:
        raise ValueError("rank 1: bad")

    with pytest.raises(ValueError, match="rank 1: bad"):
        bounded_while_progressing(fails, lambda: 0, 0.3, 10, "the call")
