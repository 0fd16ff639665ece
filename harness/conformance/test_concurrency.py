"""C24: ``collective_rpc`` called from several threads at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from harness.conformance import probes
from harness.conformance._checks import expect_equal, is_one_future, result_of, token

pytestmark = pytest.mark.timeout(300)

THREADS = 4
CALLS = 25
# The suite's own deadline for all the callers together.
_CALLERS_S = 120.0


def _run_callers(target: Any) -> dict[int, str]:
    """Runs ``target(t)`` on THREADS threads released at once; the problems they
    report, by thread. Joined with the suite's own deadline."""
    release = threading.Barrier(THREADS)
    problems: dict[int, str] = {}

    def caller(t: int) -> None:
        try:
            release.wait(30)
            problem = target(t)
        except Exception as exc:  # noqa: BLE001 - reported as this thread's outcome
            problem = f"thread {t}: collective_rpc raised {exc!r}"
        if problem:
            problems[t] = problem

    threads = [threading.Thread(target=caller, args=(t,), name=f"c24-caller-{t}", daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + _CALLERS_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [thread.name for thread in threads if thread.is_alive()]
    assert not stuck, f"{stuck} still in collective_rpc {_CALLERS_S:g} s after the callers started"
    return problems


def _check_run_order(executor: Any, key: str, world_size: int) -> None:
    """Each rank ran each thread's calls in the order that thread made them."""
    __tracebackhide__ = True
    logs = executor.collective_rpc(probes.recorded_calls, args=(key,))
    for rank, log in enumerate(logs):
        for t in range(THREADS):
            mine = [i for (thread, i) in log if thread == t]
            expect_equal(mine, list(range(CALLS)), f"rank {rank}: the order it ran thread {t}'s calls in")


@pytest.mark.clause("C24")
def test_c24_blocking_calls_from_several_threads_each_get_their_own_result(executor: Any, world_size: int) -> None:
    key = f"c24-{token()}"

    def calls(t: int) -> str | None:
        for i in range(CALLS):
            got = executor.collective_rpc(probes.record_call, args=(key, (t, i)))
            expected = [(r, (t, i)) for r in range(world_size)]
            if got != expected:
                return f"thread {t}, call {i}: got {got!r}, expected {expected!r}"
        return None

    problems = _run_callers(calls)
    assert not problems, "; ".join(problems[t] for t in sorted(problems))
    _check_run_order(executor, key, world_size)


@pytest.mark.clause("C24")
def test_c24_non_block_calls_from_several_threads_complete_in_each_threads_order(
    executor: Any, world_size: int
) -> None:
    key = f"c24-{token()}"

    def calls(t: int) -> str | None:
        futures = []
        for i in range(CALLS):
            fut = executor.collective_rpc(probes.record_call, args=(key, (t, i), 0.002), non_block=True)
            if not is_one_future(fut):
                return f"thread {t}: non_block=True returned {type(fut).__name__}, not one future"
            futures.append(fut)
        for i in reversed(range(CALLS)):
            got = result_of(futures[i], 60, f"thread {t}, future {i}")
            expected = [(r, (t, i)) for r in range(world_size)]
            if got != expected:
                return f"thread {t}, future {i}: got {got!r}, expected {expected!r}"
            if i == CALLS - 1:
                # The thread's last call is complete: so are all its earlier ones.
                pending = [j for j in range(CALLS - 1) if not futures[j].done()]
                if pending:
                    return f"thread {t}: futures {pending} not done after its later future {i} completed"
        return None

    problems = _run_callers(calls)
    assert not problems, "; ".join(problems[t] for t in sorted(problems))
    _check_run_order(executor, key, world_size)
