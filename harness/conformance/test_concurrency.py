"""C24: ``collective_rpc`` called from several threads at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from harness.conformance import probes
from harness.conformance._checks import expect_equal, is_one_future, result_of, token, wait_while_progressing
from harness.system.load import load_scale

pytestmark = pytest.mark.timeout(300)

THREADS = 4
CALLS = 25
# The suite's own waits (not SPEC's bounds; both stretch with the machine's
# load): the callers are waited for as long as calls keep completing, until no
# call has completed for _STALL_S, or _CALLERS_S in all. A backend whose callers
# hang is told in seconds; a slow one on a busy machine keeps going.
_STALL_S = 15.0
_CALLERS_S = 120.0


class _Progress:
    """How far the callers got, over all threads: the calls they saw return, and
    the futures they put in flight and that are done."""

    def __init__(self) -> None:
        self.count = 0
        self.futures: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, future: Any = None) -> None:
        """A call returned (its future, for a non-blocking one)."""
        with self._lock:
            self.count += 1
            if future is not None:
                self.futures.append(future)

    def value(self) -> int:
        with self._lock:
            futures = list(self.futures)
        return self.count + sum(1 for f in futures if f.done())


def _run_callers(target: Any) -> dict[int, str]:
    """Runs ``target(t, completed)`` on THREADS threads released at once, each
    calling ``completed()`` as each of its calls completes; the problems they
    report, by thread. Waited for while calls keep completing."""
    release = threading.Barrier(THREADS)
    problems: dict[int, str] = {}
    completed = _Progress()

    def caller(t: int) -> None:
        try:
            release.wait(30)
            problem = target(t, completed)
        except Exception as exc:  # noqa: BLE001 - reported as this thread's outcome
            problem = f"thread {t}: collective_rpc raised {exc!r}"
        if problem:
            problems[t] = problem

    threads = [threading.Thread(target=caller, args=(t,), name=f"c24-caller-{t}", daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    scale = load_scale()
    stall_s, limit_s = _STALL_S * scale, _CALLERS_S * scale
    start = time.monotonic()
    wait_while_progressing(lambda: not any(thread.is_alive() for thread in threads), completed.value, stall_s, limit_s)
    stuck = [thread.name for thread in threads if thread.is_alive()]
    assert not stuck, (
        f"{stuck} still in collective_rpc {time.monotonic() - start:.0f} s after the callers started, "
        f"{completed.value()} calls returned or completed (waited while calls completed, "
        f"until none did for {stall_s:.0f} s, or {limit_s:.0f} s in all)"
    )
    return problems


def _check_run_order(executor: Any, key: str, world_size: int) -> None:
    """Each rank ran each thread's calls in the order that thread made them."""
    __tracebackhide__ = True
    logs = executor.collective_rpc(probes.recorded_calls, args=(key,))
    for rank, log in enumerate(logs):
        for t in range(THREADS):
            mine = [i for (thread, i) in log if thread == t]
            expect_equal(mine, list(range(CALLS)), f"rank {rank}: the order it ran thread {t}'s calls in")


@pytest.mark.harness_clause("C24")
def test_c24_blocking_calls_from_several_threads_each_get_their_own_result(executor: Any, world_size: int) -> None:
    key = f"c24-{token()}"

    def calls(t: int, completed: _Progress) -> str | None:
        for i in range(CALLS):
            got = executor.collective_rpc(probes.record_call, args=(key, (t, i)))
            completed()
            expected = [(r, (t, i)) for r in range(world_size)]
            if got != expected:
                return f"thread {t}, call {i}: got {got!r}, expected {expected!r}"
        return None

    problems = _run_callers(calls)
    assert not problems, "; ".join(problems[t] for t in sorted(problems))
    _check_run_order(executor, key, world_size)


@pytest.mark.harness_clause("C24")
def test_c24_non_block_calls_from_several_threads_complete_in_each_threads_order(
    executor: Any, world_size: int
) -> None:
    key = f"c24-{token()}"

    def calls(t: int, completed: _Progress) -> str | None:
        futures = []
        for i in range(CALLS):
            fut = executor.collective_rpc(probes.record_call, args=(key, (t, i), 0.002), non_block=True)
            if not is_one_future(fut):
                return f"thread {t}: non_block=True returned {type(fut).__name__}, not one future"
            futures.append(fut)
            completed(fut)
        # The callers' wait stretches with the load; so does each thread's own.
        wait_s = _CALLERS_S * load_scale()
        for i in reversed(range(CALLS)):
            got = result_of(futures[i], wait_s, f"thread {t}, future {i}")
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
