"""``mp``'s wake-ups: no call is lost where a side stops spinning and sleeps.

After a call each side looks at its ring for a while (a worker 10 ms, the
caller 1 ms), then raises its flag, drains its wake-up pipe, looks once more
and sleeps; a sender writes a wake-up byte only where it sees the flag. These
calls land on both sides of the moment a spin ends, where a wake-up lost would
show, and an executor that never spins takes every call through the sleep.
Each carries a timeout, so a lost wake-up fails as a timeout instead of
hanging.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from harness.conformance import probes
from harness.contract import ExecutorConfig
from harness.executors.mp import MultiprocExecutor

pytestmark = pytest.mark.timeout(120)

# Seconds around the end of each side's spin, and far from it.
_AROUND = [0.0, 0.0005, 0.0009, 0.00095, 0.001, 0.00105, 0.0011, 0.002]
_AROUND_WORKER = [0.0095, 0.0099, 0.00999, 0.01, 0.01001, 0.0101, 0.0105, 0.011, 0.02, 0.05]


@pytest.fixture(scope="module")
def executor() -> Iterator[MultiprocExecutor]:
    with MultiprocExecutor(ExecutorConfig(world_size=2, start_method="fork", init_timeout_s=60)) as ex:
        yield ex


@pytest.mark.parametrize("pause", _AROUND + _AROUND_WORKER)
def test_a_call_after_a_pause_near_the_end_of_the_workers_spin_completes(
    executor: MultiprocExecutor, pause: float
) -> None:
    for _ in range(5):
        executor.collective_rpc(probes.noop, timeout=10)
        time.sleep(pause)
        assert executor.collective_rpc("ping", timeout=10) == [0, 1]


@pytest.mark.parametrize("work", _AROUND)
def test_a_reply_near_the_end_of_the_callers_spin_completes(executor: MultiprocExecutor, work: float) -> None:
    for _ in range(5):
        assert executor.collective_rpc(probes.sleep, args=(work,), timeout=10) == [0, 1]


def test_calls_in_flight_across_both_spins_complete_in_order(executor: MultiprocExecutor) -> None:
    futures = []
    for i, pause in enumerate(_AROUND + _AROUND_WORKER):
        futures.append((i, executor.collective_rpc(probes.echo_value, args=(i,), non_block=True, timeout=10)))
        time.sleep(pause)
    assert [f.result(timeout=10) for _, f in futures] == [[i, i] for i, _ in futures]


def test_every_call_completes_where_neither_side_spins() -> None:
    """Without spinning, every request and every reply goes through the
    handshake with a side about to sleep: a wake-up lost shows as a timeout."""
    with MultiprocExecutor(
        ExecutorConfig(world_size=2, start_method="fork", init_timeout_s=60), spin_s=0.0, worker_spin_s=0.0
    ) as ex:
        for i in range(3000):
            assert ex.collective_rpc(probes.echo_value, args=(i,), timeout=10) == [i, i]
        futures = [ex.collective_rpc(probes.echo_value, args=(i,), non_block=True, timeout=10) for i in range(200)]
        assert [f.result(timeout=10) for f in futures] == [[i, i] for i in range(200)]


def _pending_bytes(fd: int) -> int:
    import array
    import fcntl
    import termios

    n = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, n)
    return n[0]


def test_a_spinning_side_gets_no_wake_up_bytes(executor: MultiprocExecutor) -> None:
    """Bytes go only to a side whose flag is up, and each sleep drains them
    first: after 12,000 calls back to back the pipes hold at most what one
    sleep's window let in (a ring's worth of messages), not a byte per call."""
    group = executor._group  # mp's own pipes: this is a test of mp, not of SPEC.md
    for _ in range(12_000):
        executor.collective_rpc(probes.noop, timeout=10)
    assert _pending_bytes(group.notify_r.fileno()) <= sum(r.handle.n_slots for r in group.reply_readers)
    for fd in group.wake_fds:
        assert _pending_bytes(fd) <= group.ring.handle.n_slots
