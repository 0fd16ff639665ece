"""C9-C12, C18, C19, C22, C25: shutdown, cycles, context manager, gc, independence, idle CPU (caller and
workers), start-up failure."""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness import ExecutorConfig
from harness.conformance import probes
from harness.conformance._checks import (
    blocked_by,
    bounded,
    bounded_while_progressing,
    expect_equal,
    not_applicable,
    one_future,
    process_gone,
    process_reaped,
    raised_by,
    result_of,
    token,
    wait_until,
)
from harness.conformance._faults import DEATH_BOUND_S, kill, victim
from harness.conformance._markers import seen
from harness.conformance._workers import worker_pids
from harness.conformance.spec_bounds import bounded_by_spec, stretched, wait_within, waited
from harness.contract import FAIL_INIT_ENV
from harness.system import growth, leaks
from harness.system.load import load_scale
from harness.verdicts import Prop

pytestmark = pytest.mark.timeout(300)

#: SPEC.md's C9 bound on shutdown(), with a hung worker or not.
SHUTDOWN_BOUND_S = 30.0
#: SPEC.md's C12 bound: the workers stop this long after the last reference is dropped.
GC_BOUND_S = 10.0
#: How soon a second shutdown() or a call after shutdown() must return ("promptly").
PROMPT_S = 5.0
#: How long C10 waits, on a quiet machine, for the descriptors a shutdown closes late.
_SETTLE_S = 10.0


def _create(backend: Any, config: ExecutorConfig) -> Any:
    return bounded(lambda: backend.factory(config), config.init_timeout_s + 30, "creating the executor")


def _ranks(ex: Any, what: str) -> Any:
    return bounded(functools.partial(ex.collective_rpc, probes.rank), 60, f"collective_rpc(rank) {what}")


def _worker_pids(ex: Any) -> list[int]:
    return worker_pids(ex)


def _remote_pids(ex: Any) -> list[int]:
    """Worker pids that are not the caller's own (a backend may run rank 0 in the caller)."""
    return [p for p in _worker_pids(ex) if p != os.getpid()]


def _no_worker_processes(request: pytest.FixtureRequest) -> None:
    """Says in the report that the worker-process part of a check had nothing to look at."""
    request.node.user_properties.append(
        (Prop.NOTE, "every rank runs in the caller's process: no worker process to check, only the caller")
    )


def _shutdown(ex: Any, what: str, seconds: float = SHUTDOWN_BOUND_S) -> None:
    bounded_by_spec(ex.shutdown, seconds, what)


def _expect_call_fails_after_shutdown(ex: Any) -> None:
    __tracebackhide__ = True

    error = raised_by(lambda: ex.collective_rpc(probes.rank), PROMPT_S, "a call after shutdown()")
    assert error is not None, "a call after shutdown() returned, expected it to raise"
    # A non-blocking call too: collective_rpc itself raises. A future handed back
    # instead may never complete, and a caller that waits on it without a
    # timeout would hang on an executor that is gone.
    what = "a call after shutdown() with non_block=True"
    returned: list[object] = []
    error = raised_by(lambda: returned.append(ex.collective_rpc(probes.rank, non_block=True)), PROMPT_S, what)
    assert error is not None, f"{what} returned {returned[0]!r}, expected collective_rpc itself to raise"


def _assert_clean(
    before: leaks.Snapshot,
    pids: list[int],
    what: str,
    again: Callable[[], object] | None = None,
) -> None:
    """Workers reaped; no child, thread, shared memory or listening socket left.
    ``again`` starts and shuts down one more executor: what the first start in
    the process left for good is no leak if that one leaves nothing more (see
    ``leaks.lasting_leaks``). Descriptors are C10's, which counts them itself:
    a runtime's first start in a process may keep some for good."""
    __tracebackhide__ = True
    alive = [p for p in pids if not wait_until(functools.partial(process_reaped, p), 10 * load_scale())]
    assert not alive, f"{what}: worker processes {alive} have not exited and been reaped"
    if again is None:
        problems = leaks.wait_clean(before, timeout=10, fd_slack=None)
    else:
        _, problems = leaks.lasting_leaks(before, again)
    assert not problems, f"{what}: " + "; ".join(problems)


def _start_and_stop(backend: Any, config: ExecutorConfig) -> Callable[[], object]:
    return lambda: _shutdown(_create(backend, config), "shutdown() of one more executor")


def _hang_a_worker(ex: Any, tmp_path: Path, call: Callable[[Any, tuple[Any, ...]], object]) -> int:
    """Makes the highest rank with a process of its own hang in native code with
    SIGTERM ignored, through ``call(probe, args)``; returns that rank once it hangs."""
    pids = _worker_pids(ex)
    apart = [rank for rank, pid in enumerate(pids) if pid != os.getpid()]
    if not apart:
        not_applicable("every rank runs in the caller's process: no worker process can hang apart from it")
    rank = apart[-1]
    marker = tmp_path / f"rank-{rank}-hangs"
    call(probes.hang_in_native_code_on_rank, (rank, str(marker)))
    assert wait_until(lambda: seen(marker, pids), 60), f"rank {rank} did not reach the hang within 60 s"
    time.sleep(0.2)  # from the marker to the blocking read
    return rank


@pytest.mark.harness_clause("C9")
def test_c9_shutdown_is_bounded_with_a_worker_hung_in_native_code_and_cleans_up(
    backend: Any, executor_config: ExecutorConfig, tmp_path: Path
) -> None:
    before = leaks.baseline()
    ex = _create(backend, executor_config)
    pids = _remote_pids(ex)

    def submit(probe: Any, args: tuple[Any, ...]) -> None:
        # A non-blocking call that blocks is C4's gap, not this clause's.
        try:
            future = bounded(lambda: ex.collective_rpc(probe, args=args, non_block=True), 10, "non_block=True")
        except AssertionError:
            blocked_by("C4", "collective_rpc(non_block=True) did not return while a worker ran the call")
        one_future(future, "collective_rpc(non_block=True)")

    rank = _hang_a_worker(ex, tmp_path, submit)
    _shutdown(ex, f"shutdown() with rank {rank} hung in native code, ignoring SIGTERM")
    _assert_clean(before, pids, "after shutdown()", _start_and_stop(backend, executor_config))
    _shutdown(ex, "a second shutdown()", PROMPT_S)
    _expect_call_fails_after_shutdown(ex)


@pytest.mark.harness_clause("C9")
def test_c9_shutdown_from_another_thread_ends_a_call_blocked_on_a_hung_worker(
    backend: Any, executor_config: ExecutorConfig, tmp_path: Path
) -> None:
    before = leaks.baseline()
    ex = _create(backend, executor_config)
    pids = _remote_pids(ex)
    outcome: list[BaseException | None] = []
    callers: list[threading.Thread] = []

    def blocked_call(probe: Any, args: tuple[Any, ...]) -> None:
        try:
            ex.collective_rpc(probe, args=args)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - whatever ends the call, it must end
            outcome.append(exc)

    def start(probe: Any, args: tuple[Any, ...]) -> None:
        callers.append(threading.Thread(target=blocked_call, args=(probe, args), daemon=True))
        callers[0].start()

    rank = _hang_a_worker(ex, tmp_path, start)
    _shutdown(ex, f"shutdown() while another thread's call is blocked on rank {rank}, hung in native code")
    wait_within(lambda: not callers[0].is_alive(), SHUTDOWN_BOUND_S, "the blocked call's end after shutdown()")
    assert not callers[0].is_alive(), (
        f"the blocked call did not end within {SHUTDOWN_BOUND_S:g} s of shutdown(){waited(SHUTDOWN_BOUND_S)}"
    )
    assert outcome and outcome[0] is not None, f"the call on a hung worker returned {outcome!r} after shutdown"
    _assert_clean(before, pids, "after shutdown()", _start_and_stop(backend, executor_config))


@pytest.mark.harness_clause("C9")
def test_c9_shutdown_of_an_idle_executor_leaves_nothing(
    backend: Any, executor_config: ExecutorConfig, request: pytest.FixtureRequest
) -> None:
    before = leaks.baseline()
    ex = _create(backend, executor_config)
    pids = _remote_pids(ex)
    if not pids:
        _no_worker_processes(request)
    failures = _FailureCallbackRuns()
    bounded(lambda: ex.register_failure_callback(failures), 10, "register_failure_callback()")
    _shutdown(ex, "shutdown()")
    _assert_clean(before, pids, "after shutdown()", _start_and_stop(backend, executor_config))
    # A no-op touches no other executor either: one that is running when the
    # second shutdown() comes keeps its calls, health and callbacks.
    other = _create(backend, executor_config)
    try:
        bystander = _Bystander(other)
        _second_shutdown_is_a_no_op(ex, failures)
        bystander.expect_untouched(executor_config.world_size, "a second shutdown() of another executor")
    finally:
        _shutdown(other, "shutdown() of the other executor")
    _expect_call_fails_after_shutdown(ex)


class _FailureCallbackRuns:
    """A failure callback that counts its runs (from any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def __call__(self) -> None:
        with self._lock:
            self.count += 1


def _second_shutdown_is_a_no_op(ex: Any, failures: _FailureCallbackRuns) -> None:
    """A second shutdown() returns promptly, raises nothing and does nothing: in
    particular it runs no failure callback. What the first shutdown() did with the
    callbacks is not this sentence's: only the runs the second one adds count."""
    __tracebackhide__ = True
    runs = failures.count
    _shutdown(ex, "a second shutdown()", PROMPT_S)
    # A callback run on a thread of the executor's shows a moment later: wait a
    # little for one (a no-op adds none, so the wait costs a conformant backend 1 s).
    wait_until(lambda: failures.count != runs, 1.0)
    added = failures.count - runs
    assert added == 0, f"a second shutdown() ran the failure callback {added} time(s), expected a no-op"


@pytest.mark.harness_clause("C10")
def test_c10_ten_create_shutdown_cycles_leak_nothing(
    backend: Any, executor_config: ExecutorConfig, request: pytest.FixtureRequest
) -> None:
    # One cycle first: what a backend's first start in the process keeps for good
    # (a runtime's helpers, its connection, the descriptors they hold) is in the
    # baseline, as the leak check after each test tells a first start's residue
    # apart. From there on every descriptor counts but one (below): a leak that
    # stops growing after a few executors is still a leak.
    ex = _create(backend, executor_config)
    _ranks(ex, "in the warm-up cycle")
    _shutdown(ex, "shutdown() of the warm-up cycle")
    _descriptors_settle()
    before = leaks.baseline()
    pids = _cycles(backend, executor_config, range(10), before)
    if not pids:
        _no_worker_processes(request)
    _assert_clean(before, pids, "after 10 create/shutdown cycles")
    # A runtime may close a descriptor a moment after shutdown() returned (Ray's
    # driver tears its connections down on threads of its own): the wait for
    # them stretches with the load, as the suite's other waits do. A leaked one
    # never closes, so only a leaking backend waits it out.
    settle_s = _SETTLE_S * load_scale()
    problems = leaks.wait_clean(before, timeout=settle_s, fd_slack=0)
    if not problems:
        return
    # Descriptors alone are left to judge (_assert_clean checked the rest). A
    # runtime may open one for good at any point of its life (Ray's driver does,
    # now and then, after its warm-up): SPEC allows one such descriptor, which
    # must not grow over ten more cycles. Two or more, or growth, are a leak,
    # however few.
    # The two ends of one connected socket pair, both the caller's, are one
    # such descriptor (Ray's driver keeps a pair, now and then: CI named them).
    # So are TCP sockets whose connection has ended (Ray's driver keeps its
    # connections to a dead actor's worker until its own reconnect schedule:
    # CI named two, AF_INET6, no peer), as long as they do not grow.
    now = leaks.snapshot()
    excess = now.fds - before.fds - leaks.paired_sockets(before, now) - leaks.ended_connections(before, now)
    assert excess <= 1, f"after 10 create/shutdown cycles (a warm-up cycle before them): {'; '.join(problems)}"
    settled = now
    pids = _cycles(backend, executor_config, range(10, 20), settled)
    _assert_clean(settled, pids, "after 20 create/shutdown cycles")
    more = leaks.wait_clean(settled, timeout=settle_s, fd_slack=0)
    assert not more, f"after 10 create/shutdown cycles: {'; '.join(problems)}; and after 10 more: {'; '.join(more)}"


#: SPEC's C10: calls over which a completed call's memory, descriptors and threads must not pile up.
SOAK_CALLS = 10_000
#: Each call's argument, echoed back by every rank: a backend that keeps each
#: result keeps 16 KiB a call, 16 MiB per 1,000 calls, four times the bound.
SOAK_PAYLOAD = 16 << 10


@pytest.mark.harness_clause("C10")
def test_c10_an_executor_keeps_nothing_of_a_completed_call(executor: Any, world_size: int) -> None:
    # Blocking calls and batches of non_block ones, each checked; the caller's and
    # each worker's own memory (USS), descriptors and threads sampled every 250
    # calls. After 10,000 calls, the growth per 1,000 calls over the last 5,000
    # must be within harness.system.growth.BOUNDS; where it is not, 5,000 calls
    # more (up to 40,000): a runtime's warm-up stops growing, a kept result does not.
    pids = [pid for pid in worker_pids(executor) if pid != os.getpid()]
    processes = {"the caller": os.getpid(), **{f"the worker of pid {pid}": pid for pid in pids}}
    samples: list[tuple[int, dict[tuple[str, str], float]]] = []
    calls = rounds = 0

    def soak(until: int) -> None:
        nonlocal calls, rounds
        while calls < until:
            if not samples or calls - samples[-1][0] >= growth.SAMPLE_EVERY:
                samples.append((calls, growth.measure(processes)))
            rounds += 1
            value = (token(), bytes(SOAK_PAYLOAD))
            # Mostly batches of non_block calls: a round trip for eight calls, the
            # 10,000 in a few seconds; and a blocking call each round.
            futures = [executor.collective_rpc(probes.echo_value, args=(value,), non_block=True) for _ in range(8)]
            for future in futures:
                expect_equal(future.result(), [value] * world_size, f"call {calls} (non_block) of the soak")
            got = executor.collective_rpc(probes.echo_value, args=(value,))
            expect_equal(got, [value] * world_size, f"call {calls + 8} of the soak")
            calls += 9
        samples.append((calls, growth.measure(processes)))

    until = SOAK_CALLS
    while True:
        # Waited for while calls complete: a slow backend on a busy machine keeps going.
        stall_s = 30 * load_scale()
        bounded_while_progressing(functools.partial(soak, until), lambda: calls, stall_s, 600, f"{until} calls")
        judged = growth.growth_of(samples, since=calls - growth.WINDOW)
        window = [c for c, _ in samples if c >= calls - growth.WINDOW]
        assert len(window) >= 10 and judged, f"the soak judged {len(window)} samples of the last {growth.WINDOW} calls"
        over = [g for g in judged if g.over]
        if not over or until >= growth.MAX_CALLS:
            break
        until += growth.WINDOW
    assert not over, (
        f"over calls {calls - growth.WINDOW}..{calls}: "
        + "; ".join(g.describe() for g in over)
        + ": an executor keeps nothing of a completed call"
    )


def _descriptors_settle(quiet_s: float = 1.0, bound_s: float = 10.0) -> None:
    """Waits (up to ``bound_s``) until the caller's descriptor count has not changed
    for ``quiet_s``: what the warm-up cycle closes or opens late is settled before
    the baseline."""
    me = psutil.Process()
    if not hasattr(me, "num_fds"):
        return
    deadline = time.monotonic() + bound_s
    last, since = me.num_fds(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.1)
        now = me.num_fds()
        if now != last:
            last, since = now, time.monotonic()


def _cycles(backend: Any, config: ExecutorConfig, cycles: range, before: leaks.Snapshot) -> list[int]:
    """Create, call and shut down an executor once per cycle; the workers' pids.

    What C9 requires of every shutdown (no process, thread, segment, socket or
    file left; descriptors aside, counted after the last cycle) is checked after
    each cycle: a backend that leaks fails at its first cycle, with the leak
    named, not at the test's timeout ten slow starts later."""
    pids: list[int] = []
    for i in cycles:
        ex = _create(backend, config)
        expect_equal(_ranks(ex, f"in cycle {i}"), list(range(config.world_size)), f"cycle {i}")
        cycle_pids = _remote_pids(ex)
        _shutdown(ex, f"shutdown() in cycle {i}")
        _assert_clean(before, cycle_pids, f"after create/shutdown cycle {i + 1} (a warm-up cycle before them)")
        pids += cycle_pids
    return pids


@pytest.mark.harness_clause("C11")
def test_c11_with_block_shuts_down_on_exit(
    backend: Any, executor_config: ExecutorConfig, request: pytest.FixtureRequest
) -> None:
    before = leaks.baseline()
    made = _create(backend, executor_config)
    pids: list[int] = []

    def use() -> Any:
        with made as ex:
            pids.extend(_remote_pids(ex))
            ex.collective_rpc(probes.rank)
        return ex

    ex = bounded(use, 60 + stretched(SHUTDOWN_BOUND_S), "a with block: a call, then leaving it (shutdown)")
    if not pids:
        _no_worker_processes(request)
    _assert_clean(before, pids, "after leaving the with block", _start_and_stop(backend, executor_config))
    _expect_call_fails_after_shutdown(ex)


@pytest.mark.harness_clause("C11")
def test_c11_with_block_shuts_down_when_the_body_raises(
    backend: Any, executor_config: ExecutorConfig, request: pytest.FixtureRequest
) -> None:
    before = leaks.baseline()
    made = _create(backend, executor_config)
    pids: list[int] = []

    class BodyError(Exception):
        pass

    def use() -> None:
        with pytest.raises(BodyError), made as ex:
            pids.extend(_remote_pids(ex))
            raise BodyError

    bounded(use, 60 + stretched(SHUTDOWN_BOUND_S), "a with block whose body raises (shutdown on the way out)")
    if not pids:
        _no_worker_processes(request)
    _assert_clean(before, pids, "after the with block raised", _start_and_stop(backend, executor_config))


@pytest.mark.harness_clause("C12")
def test_c12_dropping_the_last_reference_stops_the_workers(backend: Any, executor_config: ExecutorConfig) -> None:
    ex = _create(backend, executor_config)
    pids = _remote_pids(ex)
    if not pids:
        _shutdown(ex, "shutdown()")
        not_applicable("every rank runs in the caller's process: there is no worker process to stop")
    del ex
    gc.collect()
    dropped = time.monotonic()
    what = "the workers' exit after the last reference was dropped"
    if not wait_within(lambda: all(process_gone(p) for p in pids), GC_BOUND_S, what, dropped):
        alive = [p for p in pids if not process_gone(p)]
        raise AssertionError(
            f"worker processes {alive} still run {GC_BOUND_S:g} s after the executor was dropped{waited(GC_BOUND_S)}"
        )


@pytest.mark.harness_clause("C18")
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
        got = bounded(lambda: b.collective_rpc(probes.collectives), 60, "executor b's collectives beside a")
        expect_equal(got, a_collectives(n), "executor b's collectives beside a")
    finally:
        a.shutdown()
        b.shutdown()
    _assert_clean(before, pa + pb, "after both shut down", _start_and_stop(backend, executor_config))


class _Bystander:
    """Executor ``b`` beside ``a``, its failure callbacks counted: what a fault in
    ``a`` must leave untouched (its calls, its health, its callbacks)."""

    def __init__(self, b: Any) -> None:
        self.b = b
        self.runs = 0
        bounded(lambda: b.register_failure_callback(self._ran), 10, "executor b: register_failure_callback()")

    def _ran(self) -> None:
        self.runs += 1

    def expect_untouched(self, n: int, fault: str) -> None:
        __tracebackhide__ = True
        error = raised_by(self.b.check_health, 10, f"executor b's check_health() after {fault}")
        assert error is None, f"executor b's check_health() raised {error!r} after {fault}, expected it to return"
        tag = token()
        call = functools.partial(self.b.collective_rpc, probes.echo_value, args=(tag,))
        got = bounded(call, 60, f"executor b's call after {fault}")
        expect_equal(got, [tag] * n, f"executor b's call after {fault}")
        time.sleep(0.5)  # a callback run on another thread shows by now
        assert self.runs == 0, f"executor b's failure callback ran {self.runs} time(s) after {fault}, expected never"


def _two_executors(backend: Any, config: ExecutorConfig) -> tuple[Any, Any]:
    a = _create(backend, config)
    try:
        return a, _create(backend, config)
    except BaseException:
        _shutdown(a, "shutdown() of executor a")
        raise


def _shut_both(a: Any, b: Any) -> None:
    try:
        _shutdown(a, "shutdown() of executor a")
    finally:
        _shutdown(b, "shutdown() of executor b")


@pytest.mark.harness_clause("C18")
def test_c18_a_worker_death_in_one_executor_leaves_the_others_calls_health_and_callbacks_untouched(
    backend: Any, executor_config: ExecutorConfig
) -> None:
    a, b = _two_executors(backend, executor_config)
    try:
        bystander = _Bystander(b)
        died = threading.Event()
        bounded(lambda: a.register_failure_callback(died.set), 10, "executor a: register_failure_callback()")
        pids = _worker_pids(a)
        apart = [(rank, pid) for rank, pid in enumerate(pids) if pid != os.getpid()]
        if not apart:
            not_applicable("every rank runs in the caller's process: no worker of executor a can die apart from it")
        rank, pid = apart[-1]
        os.kill(pid, signal.SIGKILL)
        if not died.wait(10):  # C8's bound: a's death is noticed before b is looked at
            blocked_by("C8", f"executor a's failure callback did not run within 10 s of its rank {rank}'s death")
        bystander.expect_untouched(executor_config.world_size, f"executor a's rank {rank} died")
    finally:
        _shut_both(a, b)


@pytest.mark.harness_clause("C18")
def test_c18_a_timeout_in_one_executor_leaves_the_others_calls_health_and_callbacks_untouched(
    backend: Any, executor_config: ExecutorConfig, world_size: int
) -> None:
    a, b = _two_executors(backend, executor_config)
    try:
        bystander = _Bystander(b)
        slow = world_size - 1
        error = raised_by(
            lambda: a.collective_rpc(probes.sleep_on_rank, args=(slow, 3.0), timeout=0.5),
            30,
            "executor a's call with timeout=0.5",
        )
        if not isinstance(error, TimeoutError):
            blocked_by("C7", f"executor a's call with timeout=0.5 on a 3 s call ended with {error!r}, not TimeoutError")
        bystander.expect_untouched(world_size, "a call of executor a timed out")
    finally:
        _shut_both(a, b)


@pytest.mark.harness_clause("C18")
def test_c18_a_shutdown_of_one_executor_leaves_the_others_calls_health_and_callbacks_untouched(
    backend: Any, executor_config: ExecutorConfig
) -> None:
    a, b = _two_executors(backend, executor_config)
    try:
        bystander = _Bystander(b)
        _shutdown(a, "shutdown() of executor a")
        bystander.expect_untouched(executor_config.world_size, "executor a shut down")
        got = bounded(lambda: b.collective_rpc(probes.collectives), 60, "executor b's collectives after a shut down")
        expect_equal(got, a_collectives(executor_config.world_size), "executor b's collectives after a shut down")
    finally:
        _shut_both(a, b)


def a_collectives(n: int) -> list[dict[str, Any]]:
    from harness.conformance.test_process_group import expected_collectives

    return [expected_collectives(n)] * n


#: SPEC.md's C19: with no call in flight, the caller's process, measured over this long, ...
CALLER_WINDOW_S = 2.0
#: ... stays under this share of one core, ...
IDLE_CALLER_SHARE = 0.10
#: ... in each of this many windows one after the other: "no call in flight"
#: also once the executor has been idle a while (6.5 s after the call here).
CALLER_WINDOWS = 3


@pytest.mark.harness_clause("C19")
def test_c19_idle_executor_burns_no_caller_cpu(executor: Any) -> None:
    """After a blocking call and a non-blocking one, the caller's whole process
    (every thread) over consecutive 2 s windows, from just after the call to
    after it has been idle a while (CALLER_WINDOWS), each judged on its own:
    its CPU time, and how much of the window its busiest thread was runnable (as
    C25 judges a worker). A thread that starts spinning only once the executor
    has been idle for seconds shows in a later window.

    Not ``exclusive``: the process's own CPU time is not raised by tests beside
    it, and a busy machine, which shrinks what a spinning thread gets, does not
    shrink the time it is runnable."""
    executor.collective_rpc(probes.rank)
    result_of(one_future(executor.collective_rpc(probes.rank, non_block=True), "non_block=True"), 60, "a future")
    _expect_an_idle_caller(time.time(), CALLER_WINDOWS, "an idle executor")


@pytest.mark.harness_clause("C19")
def test_c19_an_executor_whose_worker_died_burns_no_caller_cpu(executor: Any) -> None:
    """ "With no call in flight": also once a worker has died and the executor
    has failed (a reader looping on a closed connection spins)."""
    rank, pid = victim(executor)
    failed = threading.Event()
    bounded(lambda: executor.register_failure_callback(failed.set), 30, "register_failure_callback")
    died = kill(pid)
    if not failed.wait(DEATH_BOUND_S * load_scale()):
        blocked_by("C8", f"the failure callbacks did not run within {DEATH_BOUND_S:g} s of rank {rank}'s death")
    _expect_an_idle_caller(time.time(), 1, f"an executor whose rank {rank} died {time.monotonic() - died:.1f} s ago")


def _expect_an_idle_caller(returned: float, windows: int, what: str) -> None:
    """The caller's whole process over ``windows`` 2 s windows one after the
    other, from 0.5 s after ``returned``, each judged on its own."""
    __tracebackhide__ = True
    time.sleep(0.5)  # let any post-call activity settle
    for figure in probes.idle_windows(CALLER_WINDOW_S, windows):
        burning = _burning(f"the idle caller (pid {os.getpid()})", figure, returned, IDLE_CALLER_SHARE)
        assert burning is None, (
            f"{what} must burn no caller CPU (C19: under {100 * IDLE_CALLER_SHARE:g} % of one core over "
            f"{CALLER_WINDOW_S:g} s; no thread that never sleeps): {burning}"
        )


#: SPEC.md's C25: once no call has been in flight this long, ...
IDLE_AFTER_S = 3.0
#: ... every worker's CPU, measured over this long, ...
IDLE_WINDOW_S = 2.0
#: ... stays under this share of one core, ...
IDLE_WORKER_SHARE = 0.05
#: ... in each of this many windows one after the other: "once" holds at every
#: later moment too (3.5 s to 9.5 s after the call here), as C19's windows do.
IDLE_WINDOWS = 3
#: "A reader that never sleeps": a thread of the worker runnable (on a CPU or
#: waiting for one) this much of the window. On a quiet machine such a thread
#: burns as much, far over IDLE_WORKER_SHARE; on a loaded one it may get under
#: 5 % of a core and still never sleep: this figure does not shrink with the load.
NEVER_SLEEPS_SHARE = 0.9
#: ... and on a CPU at least this much of it. A thread asleep throughout can
#: read as runnable: kernels that leave a sleeping thread queued for a while
#: (EEVDF's delayed dequeue) have counted its sleep as waiting for a CPU. A
#: thread that never sleeps gets far more than this, unless hundreds of others
#: share each CPU.
NEVER_SLEEPS_ON_CPU = 0.002
#: A worker's measuring thread counts from when the call that starts it runs,
#: before its reply is on the way back: this much more, so that its window
#: begins at least IDLE_AFTER_S after the call completed in the caller.
REPLY_MARGIN_S = 0.5


def _burning(who: str, f: dict[str, Any], returned: float, limit: float = IDLE_WORKER_SHARE) -> str | None:
    """What is wrong with the idle figure ``f`` of ``who`` (a rank's process, or
    the caller's), or None: its CPU share at or over ``limit``, or a thread of it
    that never slept."""
    share = f["cpu_s"] / f["wall_s"]
    runnable = f.get("busiest_runnable", 0.0)
    never_slept = runnable >= NEVER_SLEEPS_SHARE and f.get("busiest_on_cpu", 0.0) >= NEVER_SLEEPS_ON_CPU
    if share < limit and not never_slept:
        return None
    window = (
        f"over {f['wall_s']:.1f} s, from {f['began'] - returned:.1f} s to {f['ended'] - returned:.1f} s "
        "after the last call returned"
    )
    if "arrived" in f and f["arrived"] < f["ended"]:
        window += f" (the collecting call came {f['ended'] - f['arrived']:.2f} s before the window ended)"
    spinner = (
        f"its thread {f['busiest_thread']!r} never slept (runnable {100 * runnable:.0f} % of the window, "
        f"on a CPU {100 * f['busiest_on_cpu']:.1f} %)"
        if never_slept
        else ""
    )
    if share >= limit:
        return f"{who} burned {100 * share:.1f} % of one core {window}" + (f"; {spinner}" if spinner else "")
    return f"{who} burned {100 * share:.1f} % of one core {window}, but {spinner}"


@pytest.mark.harness_clause("C25")
def test_c25_idle_workers_sleep(executor: Any, world_size: int, request: pytest.FixtureRequest) -> None:
    """One call starts a thread in each rank's process that, 3.5 s later, reads the
    CPU time of that whole process (every thread) over 2 s, and how much of those
    2 s each of its threads was runnable, then the same over the next 2 s windows
    (IDLE_WINDOWS, each judged on its own: a worker that falls into a spin only
    after seconds of idle shows in a later one); the caller makes no call
    meanwhile (a plain sleep), then one call collects the figures.

    Not ``exclusive``: a rank's own CPU time is not raised by other tests beside
    it, and a busy machine, which shrinks what a spinning thread gets, does not
    shrink the time it is runnable. At every world size: a worker may poll per peer."""
    key = token()
    after = IDLE_AFTER_S + REPLY_MARGIN_S
    started = bounded(
        lambda: executor.collective_rpc(probes.measure_idle_cpu, args=(key, after, IDLE_WINDOW_S, IDLE_WINDOWS)),
        60,
        "collective_rpc(measure_idle_cpu), which starts each rank's measurement",
    )
    returned = time.time()
    expect_equal(started, list(range(world_size)), "the call that starts each rank's measurement")
    # No call until every window has ended: the workers are idle throughout.
    time.sleep(after + IDLE_WINDOWS * IDLE_WINDOW_S + stretched(0.3))
    wait_s = stretched(10.0)
    figures = bounded(
        lambda: executor.collective_rpc(probes.idle_cpu_measured, args=(key, wait_s)),
        wait_s + 60,
        "collective_rpc(idle_cpu_measured), which collects each rank's figure",
    )
    assert isinstance(figures, list) and len(figures) == world_size, (
        f"the collecting call returned {figures!r}, expected one figure per rank"
    )
    missing = [f"rank {r}: {f['missing']}" for r, f in enumerate(figures) if "missing" in f]
    assert not missing, "no idle-CPU figure from " + "; ".join(missing)
    windows = [[f, *f.get("later", ())] for f in figures]  # each rank's, in order
    judged = (_burning(f"rank {r} (pid {f['pid']})", w, returned) for r, f in enumerate(figures) for w in windows[r])
    burning = [found for found in judged if found is not None]
    assert not burning, (
        f"idle workers must sleep (C25: under {100 * IDLE_WORKER_SHARE:g} % of one core over {IDLE_WINDOW_S:g} s, "
        f"once no call has been in flight for {IDLE_AFTER_S:g} s; no thread that never sleeps): " + "; ".join(burning)
    )
    shares = ", ".join(
        f"rank {r} " + " / ".join(f"{100 * w['cpu_s'] / w['wall_s']:.2f} %" for w in ws) for r, ws in enumerate(windows)
    )
    since = min(f["began"] for f in figures) - returned
    until = max(ws[-1]["ended"] for ws in windows) - returned
    note = (
        f"idle CPU in {IDLE_WINDOW_S:g} s windows, from {since:.1f} s to {until:.1f} s after the last call "
        f"returned: {shares}"
    )
    runnable = [(f["busiest_runnable"], r) for r, f in enumerate(figures) if "busiest_runnable" in f]
    if runnable:
        most, r = max(runnable)
        note += f"; the busiest thread runnable {100 * most:.1f} % of the window (rank {r})"
    if len(runnable) < len(figures):
        note += " (no schedstat in /proc: a thread that never sleeps is judged by its CPU alone)"
    in_caller = [r for r, f in enumerate(figures) if int(f["pid"]) == os.getpid()]
    if in_caller:
        note += f" (ranks {in_caller} run in the caller's process: their figure is the caller's, every thread)"
    request.node.user_properties.append((Prop.NOTE, note))


def _injected_failure(rank: int) -> str:
    """What a built-in worker raises when ``HARNESS_FAIL_WORKER_INIT=<rank>`` is set
    (``harness.executors.mp.worker.init_distributed``): the message the construction error must carry."""
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


@pytest.mark.harness_clause("C22")
@pytest.mark.parametrize("which", ["first", "last"])
def test_c22_a_worker_failing_to_start_fails_construction_cleanly(
    backend: Any, executor_config: ExecutorConfig, world_size: int, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rank = 0 if which == "first" else world_size - 1
    # The bound this test sets the backend, stretched with the load: a correct
    # start across 2 simulated nodes at ws4 took longer than 60 s at 8 runnable
    # per CPU (CI, 2026-12-04). The variant's other settings (nodes) stay.
    init_timeout = 60.0 * load_scale()
    cfg = dataclasses.replace(executor_config, init_timeout_s=init_timeout)
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
    # The start without the injection came first: what a first start leaves for good is in `before`.
    problems = leaks.wait_clean(before, timeout=10, fd_slack=None)
    assert not problems, f"after a failed start (rank {rank}): " + "; ".join(problems)
    threads = [
        t.name
        for t in threading.enumerate()
        if t.ident not in before.threads and not t.name.startswith(leaks.SUITE_THREAD_PREFIX)
    ]
    assert not threads, f"threads left after a failed start: {threads}"
