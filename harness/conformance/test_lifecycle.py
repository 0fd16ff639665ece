"""C9-C12, C18, C19, C22: shutdown, cycles, context manager, gc, independence, idle CPU, start-up failure."""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import threading
import time
from typing import Any

import psutil
import pytest

from harness import ExecutorConfig, leaks, probes
from harness.conformance._checks import (
    bounded,
    expect_equal,
    one_future,
    process_gone,
    process_reaped,
    result_of,
    wait_until,
    within,
)

pytestmark = pytest.mark.timeout(300)

FAIL_INIT_ENV = "HARNESS_FAIL_WORKER_INIT"


def _worker_pids(ex: Any) -> list[int]:
    return [int(p) for p in ex.collective_rpc(probes.pid)]


def _remote_pids(ex: Any) -> list[int]:
    """Worker pids that are not the caller's own (a backend may run rank 0 in the caller)."""
    return [p for p in _worker_pids(ex) if p != os.getpid()]


def _assert_clean(before: leaks.Snapshot, pids: list[int], what: str, count_fds: bool = False) -> None:
    """Workers reaped; no child, thread, shared memory or listening socket left.
    Descriptors only when asked (C10): a runtime's first start in a process may
    keep some for good, which only a comparison after a warm-up cycle tells apart."""
    __tracebackhide__ = True
    alive = [p for p in pids if not wait_until(functools.partial(process_reaped, p), 10)]
    assert not alive, f"{what}: worker processes {alive} have not exited and been reaped"
    problems = leaks.wait_clean(before, timeout=10, fd_slack=0 if count_fds else None)
    assert not problems, f"{what}: " + "; ".join(problems)


@pytest.mark.clause("C9")
def test_c9_shutdown_is_bounded_with_a_hung_worker_and_cleans_up(
    backend: Any, executor_config: ExecutorConfig, world_size: int
) -> None:
    before = leaks.baseline()
    ex = backend.factory(executor_config)
    pids = _remote_pids(ex)
    ex.collective_rpc(probes.sleep_on_rank, args=(world_size - 1, 3600.0), non_block=True)
    time.sleep(0.5)  # the call is running: the worker hangs in it
    with within(30, "shutdown() with a hung worker"):
        ex.shutdown()
    _assert_clean(before, pids, "after shutdown()")
    with within(5, "a second shutdown()"):
        ex.shutdown()
    with within(5, "a call after shutdown()"), pytest.raises(Exception):  # noqa: B017 - SPEC names no type
        ex.collective_rpc(probes.rank)


@pytest.mark.clause("C9")
def test_c9_shutdown_from_another_thread_ends_a_call_blocked_on_a_hung_worker(
    backend: Any, executor_config: ExecutorConfig, world_size: int
) -> None:
    before = leaks.baseline()
    ex = backend.factory(executor_config)
    pids = _remote_pids(ex)
    outcome: list[BaseException | None] = []

    def blocked_call() -> None:
        try:
            ex.collective_rpc(probes.sleep_on_rank, args=(world_size - 1, 3600.0))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - whatever ends the call, it must end
            outcome.append(exc)

    caller = threading.Thread(target=blocked_call, daemon=True)
    caller.start()
    time.sleep(1.0)  # the call is blocked on the hung rank
    with within(30, "shutdown() while another thread's call is blocked on a hung worker"):
        ex.shutdown()
    caller.join(30)
    assert not caller.is_alive(), "the blocked call did not end within 30 s of shutdown()"
    assert outcome and outcome[0] is not None, f"the call on a hung worker returned {outcome!r} after shutdown"
    _assert_clean(before, pids, "after shutdown()")


@pytest.mark.clause("C9")
def test_c9_shutdown_of_an_idle_executor_leaves_nothing(backend: Any, executor_config: ExecutorConfig) -> None:
    before = leaks.baseline()
    ex = backend.factory(executor_config)
    pids = _remote_pids(ex)
    with within(30, "shutdown()"):
        ex.shutdown()
    _assert_clean(before, pids, "after shutdown()")


@pytest.mark.clause("C10")
def test_c10_ten_create_shutdown_cycles_leak_nothing(backend: Any, executor_config: ExecutorConfig) -> None:
    # One cycle first: a backend may start process-wide helpers once (e.g. a runtime).
    ex = backend.factory(executor_config)
    ex.collective_rpc(probes.rank)
    ex.shutdown()
    before = leaks.baseline()
    pids: list[int] = []
    for i in range(10):
        ex = backend.factory(executor_config)
        expect_equal(ex.collective_rpc(probes.rank), list(range(executor_config.world_size)), f"cycle {i}")
        pids += _remote_pids(ex)
        ex.shutdown()
    del ex
    _assert_clean(before, pids, "after 10 create/shutdown cycles", count_fds=True)


@pytest.mark.clause("C11")
def test_c11_with_block_shuts_down_on_exit(backend: Any, executor_config: ExecutorConfig) -> None:
    before = leaks.baseline()
    with backend.factory(executor_config) as ex:
        pids = _remote_pids(ex)
        ex.collective_rpc(probes.rank)
    _assert_clean(before, pids, "after leaving the with block")
    with pytest.raises(Exception):  # noqa: B017 - SPEC names no type
        ex.collective_rpc(probes.rank)


@pytest.mark.clause("C11")
def test_c11_with_block_shuts_down_when_the_body_raises(backend: Any, executor_config: ExecutorConfig) -> None:
    before = leaks.baseline()
    pids: list[int] = []

    class BodyError(Exception):
        pass

    with pytest.raises(BodyError), backend.factory(executor_config) as ex:
        pids = _remote_pids(ex)
        raise BodyError
    _assert_clean(before, pids, "after the with block raised")


@pytest.mark.clause("C12")
def test_c12_dropping_the_last_reference_stops_the_workers(backend: Any, executor_config: ExecutorConfig) -> None:
    ex = backend.factory(executor_config)
    pids = _remote_pids(ex)
    del ex
    gc.collect()
    alive = [p for p in pids if not wait_until(functools.partial(process_gone, p), 10)]
    assert not alive, f"worker processes {alive} still run 10 s after the executor was dropped"


@pytest.mark.clause("C18")
def test_c18_two_executors_at_once_are_independent(backend: Any, executor_config: ExecutorConfig) -> None:
    before = leaks.baseline()
    a = backend.factory(executor_config)
    try:
        b = backend.factory(executor_config)
    except BaseException:
        a.shutdown()
        raise
    n = executor_config.world_size
    try:
        pa, pb = _remote_pids(a), _remote_pids(b)
        assert not set(pa) & set(pb), f"the executors share worker processes {set(pa) & set(pb)}"
        fa = one_future(a.collective_rpc(probes.sleep_then_echo, args=(0.2, "a"), non_block=True), "non_block=True")
        got = bounded(lambda: b.collective_rpc(probes.echo_value, args=("b",)), 60, "executor b's call while a is busy")
        expect_equal(got, ["b"] * n, "executor b while a is busy")
        expect_equal(result_of(fa, 60, "executor a's future"), [(r, "a") for r in range(n)], "executor a")
        a.shutdown()
        got = bounded(lambda: b.collective_rpc(probes.collectives), 60, "executor b's collectives after a shut down")
        expect_equal(got, a_collectives(n), "executor b after a shut down")
    finally:
        a.shutdown()
        b.shutdown()
    _assert_clean(before, pa + pb, "after both shut down")


def a_collectives(n: int) -> list[dict[str, Any]]:
    from harness.conformance.test_process_group import expected_collectives

    return [expected_collectives(n)] * n


@pytest.mark.clause("C19")
def test_c19_idle_executor_burns_no_caller_cpu(executor: Any) -> None:
    executor.collective_rpc(probes.rank)
    result_of(one_future(executor.collective_rpc(probes.rank, non_block=True), "non_block=True"), 60, "a future")
    time.sleep(0.5)  # let any post-call activity settle
    me = psutil.Process()
    c0, t0 = sum(me.cpu_times()[:2]), time.monotonic()
    time.sleep(2.0)
    used, elapsed = sum(me.cpu_times()[:2]) - c0, time.monotonic() - t0
    share = used / elapsed
    assert share < 0.10, f"the idle caller used {100 * share:.1f} % of a core over {elapsed:.1f} s, expected < 10 %"


def _injected_failure(rank: int) -> str:
    """What a built-in worker raises when ``HARNESS_FAIL_WORKER_INIT=<rank>`` is set
    (``harness.worker.init_distributed``): the message the construction error must carry."""
    return f"rank {rank}: start-up failure injected by {FAIL_INIT_ENV}={rank}"


def _messages(exc: BaseException) -> str:
    """The text of an error and of the errors it was raised from (or during)."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(str(current))
        parts += [str(note) for note in getattr(current, "__notes__", ())]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


@pytest.mark.clause("C22")
@pytest.mark.parametrize("which", ["first", "last"])
def test_c22_a_worker_failing_to_start_fails_construction_cleanly(
    backend: Any, executor_config: ExecutorConfig, world_size: int, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rank = 0 if which == "first" else world_size - 1
    init_timeout = 60.0
    cfg = ExecutorConfig(
        world_size,
        executor_config.device,
        executor_config.dist_backend,
        executor_config.start_method,
        dict(executor_config.env),
        init_timeout,
    )
    # The same config without the injection starts: else a backend that refuses
    # any start (or refuses the variable itself) would pass for a clean failure.
    ex = bounded(lambda: backend.factory(cfg), init_timeout + 5, "construction without the injection")
    try:
        expect_equal(ex.collective_rpc(probes.rank), list(range(world_size)), "a call, without the injection")
    finally:
        bounded(ex.shutdown, 30, "shutdown() of the executor started without the injection")
    injected = dataclasses.replace(cfg, env={**cfg.env, FAIL_INIT_ENV: str(rank)})
    monkeypatch.setenv(FAIL_INIT_ENV, str(rank))
    gc.collect()
    before = leaks.baseline()
    start = time.monotonic()

    def construct() -> BaseException | None:
        try:
            ex = backend.factory(injected)
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            return exc
        ex.shutdown()
        return None

    error = bounded(construct, init_timeout + 10, f"construction with {FAIL_INIT_ENV}={rank}")
    took = time.monotonic() - start
    assert error is not None, f"construction with {FAIL_INIT_ENV}={rank} succeeded, expected it to raise"
    assert took <= init_timeout + 5, f"construction failed after {took:.1f} s, expected within init_timeout_s"
    assert not isinstance(error, NotImplementedError), f"got {error!r}, a missing feature, not a start-up failure"
    expected = _injected_failure(rank)
    assert expected in _messages(error), (
        f"construction raised {error!r}, expected an error carrying the failing worker's message {expected!r}"
    )
    gc.collect()
    problems = leaks.wait_clean(before, timeout=10, fd_slack=None)
    assert not problems, f"after a failed start (rank {rank}): " + "; ".join(problems)
    threads = [
        t.name
        for t in threading.enumerate()
        if t.ident not in before.threads and not t.name.startswith(leaks.SUITE_THREAD_PREFIX)
    ]
    assert not threads, f"threads left after a failed start: {threads}"
