"""``mp`` skips a wake-up byte only while the other side promised to be looking.

A skipped byte to a side that then sleeps would be a lost wake-up: the call
would never complete. These calls land on both sides of the moment a promise
runs out (a worker's 10 ms, the caller's 1 ms), where a wrong skip would show;
each carries a timeout, so a lost wake-up fails as a timeout instead of hanging.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from harness import probes
from harness.contract import ExecutorConfig
from harness.executors.multiproc import MultiprocExecutor

pytestmark = pytest.mark.timeout(120)

# Seconds around each side's promise running out, and far from it.
_AROUND = [0.0, 0.0005, 0.0009, 0.00095, 0.001, 0.00105, 0.0011, 0.002]
_AROUND_WORKER = [0.0095, 0.0099, 0.00999, 0.01, 0.01001, 0.0101, 0.0105, 0.011, 0.02, 0.05]


@pytest.fixture(scope="module")
def executor() -> Iterator[MultiprocExecutor]:
    with MultiprocExecutor(ExecutorConfig(world_size=2, start_method="fork", init_timeout_s=60)) as ex:
        yield ex


@pytest.mark.parametrize("pause", _AROUND + _AROUND_WORKER)
def test_a_call_after_a_pause_near_the_workers_promise_completes(executor: MultiprocExecutor, pause: float) -> None:
    for _ in range(5):
        executor.collective_rpc(probes.noop, timeout=10)
        time.sleep(pause)
        assert executor.collective_rpc("ping", timeout=10) == [0, 1]


@pytest.mark.parametrize("work", _AROUND)
def test_a_reply_near_the_end_of_the_callers_promise_completes(executor: MultiprocExecutor, work: float) -> None:
    for _ in range(5):
        assert executor.collective_rpc(probes.sleep, args=(work,), timeout=10) == [0, 1]


def test_calls_in_flight_across_both_promises_complete_in_order(executor: MultiprocExecutor) -> None:
    futures = []
    for i, pause in enumerate(_AROUND + _AROUND_WORKER):
        futures.append((i, executor.collective_rpc(probes.echo_value, args=(i,), non_block=True, timeout=10)))
        time.sleep(pause)
    assert [f.result(timeout=10) for _, f in futures] == [[i, i] for i, _ in futures]
