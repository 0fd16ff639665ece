"""C1-C5, C21: what calls return, and how futures behave."""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time
from typing import Any

import pytest

from harness.conformance import _work_in_flight, probes
from harness.conformance._checks import (
    STALL_S,
    blocked_by,
    bounded,
    bounded_while_progressing,
    expect_equal,
    is_one_future,
    not_applicable,
    one_future,
    raised_by,
    result_of,
    token,
    wait_until,
)
from harness.system.load import load_scale

#: What SPEC.md's C4 calls ``TimeoutError`` (the same class from Python 3.11 on).
_TIMEOUT_ERRORS = (TimeoutError, concurrent.futures.TimeoutError)
# How long a future of a quick call may take before the suite's watchdog fails the test.
_WAIT_S = 60.0
# How long the suite waits for a callback that a backend may run on a thread of its own.
_CALLBACK_S = 10.0

pytestmark = pytest.mark.timeout(300)


@pytest.mark.harness_clause("C1")
def test_c1_results_are_in_rank_order_whatever_order_ranks_finish(executor: Any, world_size: int) -> None:
    # Rank r sleeps (n-1-r) * step: the highest rank answers first. Rank r answers
    # n - r, so that neither arrival order nor sorted order is rank order.
    values = [(world_size - r, token()) for r in range(world_size)]
    got = executor.collective_rpc(probes.finish_in_reverse_with, args=(0.3, values))
    expect_equal(got, values, "collective_rpc(finish_in_reverse_with), rank r answering values[r]")


@pytest.mark.harness_clause("C1")
def test_c1_blocking_call_returns_one_entry_per_rank(executor: Any, world_size: int) -> None:
    got = executor.collective_rpc(probes.rank)
    assert isinstance(got, list), f"got {type(got).__name__}, expected list [collective_rpc(rank)]"
    expect_equal(got, list(range(world_size)), "collective_rpc(rank)")
    # One entry per rank, whatever it is: also None, from every rank.
    expect_equal(executor.collective_rpc(probes.noop), [None] * world_size, "collective_rpc(noop), every rank None")


@pytest.mark.harness_clause("C2")
def test_c2_unique_reply_rank_returns_that_rank_alone(executor: Any, world_size: int) -> None:
    for r in range(world_size):
        expect_equal(executor.collective_rpc(probes.rank, unique_reply_rank=r), r, f"unique_reply_rank={r}")


@pytest.mark.harness_clause("C2")
def test_c2_every_rank_runs_the_call_when_one_reply_is_asked_for(executor: Any, world_size: int) -> None:
    key = f"c2-{token()}"
    for r in range(world_size):
        executor.collective_rpc(probes.count_calls, args=(key,), unique_reply_rank=r)
    ran = executor.collective_rpc(probes.calls_counted, args=(key,))
    for r in range(world_size):
        expect_equal(
            ran[r],
            world_size,
            f"rank {r}: count_calls run, after {world_size} calls each narrowed to one rank's reply",
        )


@pytest.mark.harness_clause("C2")
def test_c2_a_call_narrowed_to_one_reply_may_use_collectives(executor: Any, world_size: int) -> None:
    # Every rank must take part, or the others wait in the collective: the
    # suite's watchdog, not the backend, ends that wait.
    got = bounded(
        lambda: executor.collective_rpc(probes.collectives, unique_reply_rank=world_size - 1),
        _WAIT_S,
        f"collective_rpc(collectives, unique_reply_rank={world_size - 1})",
    )
    from harness.conformance.test_process_group import expected_collectives

    expect_equal(got, expected_collectives(world_size), f"collectives, reply of rank {world_size - 1}")


@pytest.mark.harness_clause("C2")
@pytest.mark.parametrize("call", ["blocking", "non_block"])
@pytest.mark.parametrize("where", ["world_size", "-1"])
def test_c2_out_of_range_rank_is_value_error_before_sending(
    executor: Any, world_size: int, where: str, call: str
) -> None:
    bad = world_size if where == "world_size" else -1
    key = f"c2-{token()}"
    executor.collective_rpc(probes.count_calls, args=(key,))
    # collective_rpc itself raises, non_block=True too: a future that fails later
    # means the call was made (and possibly sent).
    with pytest.raises(ValueError):
        executor.collective_rpc(probes.count_calls, args=(key,), unique_reply_rank=bad, non_block=call == "non_block")
    # Nothing reached the workers: the counter moved once more, not twice.
    expect_equal(
        executor.collective_rpc(probes.count_calls, args=(key,)),
        [2] * world_size,
        f"calls seen by workers after unique_reply_rank={bad}",
    )


_ARGS = (1, -(2**70), 3.5, "ünïcode", b"\x00bytes", None, [1, [2, (3,)]], {"k": {"n": [1, 2]}})
_KWARGS = {"alpha": 1, "beta": ("x", b"y"), "gamma": None, "delta": {"nested": [1.25]}}


@pytest.mark.harness_clause("C3")
def test_c3_args_and_kwargs_reach_a_callable_unchanged(executor: Any, world_size: int) -> None:
    got = executor.collective_rpc(probes.echo, args=_ARGS, kwargs=_KWARGS)
    expect_equal(got, [(r, _ARGS, _KWARGS) for r in range(world_size)], "collective_rpc(echo, args, kwargs)")


@pytest.mark.harness_clause("C3")
def test_c3_args_and_kwargs_reach_a_string_method_unchanged(executor: Any, world_size: int) -> None:
    # SPEC.md promises a worker only ``rank``: the probe adds the method to the
    # worker's class, never to the worker object (which may refuse attributes).
    installed = executor.collective_rpc(probes.install_echo_method)
    assert installed == [True] * world_size, (
        f"got {installed!r} from install_echo_method: a worker class refuses new methods, "
        "so no string method can be checked"
    )
    got = executor.collective_rpc(probes.ECHO_METHOD, args=_ARGS, kwargs=_KWARGS)
    expect_equal(got, [(r, _ARGS, _KWARGS) for r in range(world_size)], f"collective_rpc({probes.ECHO_METHOD!r})")


@pytest.mark.harness_clause("C4")
@pytest.mark.parametrize("unique", [False, True], ids=["all-ranks", "unique-reply"])
def test_c4_non_block_returns_one_future_resolving_to_the_blocking_result(
    executor: Any, world_size: int, unique: bool
) -> None:
    kw = {"unique_reply_rank": world_size - 1} if unique else {}
    tag = token()
    try:
        blocking = executor.collective_rpc(probes.echo, args=(tag,), **kw)
    except Exception as exc:
        if unique:  # the blocking call narrowed to one reply is C2's to judge
            blocked_by("C2", f"the blocking collective_rpc(echo, unique_reply_rank={world_size - 1}) raised {exc!r}")
        raise
    fut = executor.collective_rpc(probes.echo, args=(tag,), non_block=True, **kw)
    assert not isinstance(fut, (list, tuple)), f"got a {type(fut).__name__} of futures, expected one future"
    assert is_one_future(fut), f"got {type(fut).__name__}, expected a concurrent.futures.Future"
    got = bounded(lambda: fut.result(timeout=60), 70, "future.result(timeout=60)")
    expect_equal(got, blocking, "non_block future result vs blocking result")
    assert fut.done() and fut.exception() is None


@pytest.mark.harness_clause("C4")
@pytest.mark.parametrize("wait", ["result", "exception"])
def test_c4_a_wait_with_timeout_on_a_pending_future_raises_timeout_error_and_the_future_completes(
    executor: Any, world_size: int, wait: str
) -> None:
    # The call outlasts the longest wait the check accepts (t + 2 s), so its
    # future is still pending when the wait times out; no longer than that.
    t = 0.5
    slow = t + 2 + 0.5
    tag = token()
    fut = executor.collective_rpc(probes.sleep_then_echo, args=(slow, tag), non_block=True)
    assert is_one_future(fut), f"got {type(fut).__name__}, expected a concurrent.futures.Future"
    if fut.done():
        # A backend that runs calls on the caller's thread returns them complete.
        not_applicable(f"the future of a {slow:g} s call was complete when collective_rpc returned: none is pending")
    call = f"future.{wait}(timeout={t:g}) on a pending future"

    def wait_once() -> tuple[str, Any, float]:
        start = time.monotonic()
        try:
            value = getattr(fut, wait)(timeout=t)
        except BaseException as exc:  # noqa: BLE001 - judged below
            return "raised", exc, time.monotonic() - start
        return "returned", value, time.monotonic() - start

    # The suite's watchdog bounds the wait: a future that ignores its timeout fails here, named.
    how, got, took = bounded(wait_once, t + 10, call)
    assert how == "raised" and isinstance(got, _TIMEOUT_ERRORS), (
        f"{call} {how} {got!r} after {took:.1f} s, expected TimeoutError after about {t:g} s"
    )
    assert 0.9 * t <= took <= t + 2, f"{call} raised TimeoutError after {took:.2f} s, expected about {t:g} s"
    expect_equal(
        result_of(fut, slow + 30, f"the future, after {call} timed out"),
        [(r, tag) for r in range(world_size)],
        f"the future's result, after {call} timed out",
    )


#: How long the call runs whose future must not read done() before it completed.
_RUNNING_S = 1.5


@pytest.mark.harness_clause("C4")
def test_c4_each_future_method_behaves_as_concurrent_futures_does_for_the_calls_outcome(
    executor: Any, world_size: int
) -> None:
    """``done()`` says whether the call completed, not whether it was sent; a
    failed call's ``exception()`` returns its error (with a timeout too) and
    ``result()`` raises it, as ``concurrent.futures.Future``'s do."""
    tag = token()
    submitted = time.monotonic()
    fut = executor.collective_rpc(probes.sleep_then_echo, args=(_RUNNING_S, tag), non_block=True)
    returned = time.monotonic() - submitted
    assert is_one_future(fut), f"got {type(fut).__name__}, expected a concurrent.futures.Future"
    done = fut.done()
    since = time.monotonic() - submitted
    # A backend that runs calls on the caller's thread returns them complete:
    # done() is then right to say so. Earlier, the workers are still asleep.
    if returned < _RUNNING_S and since < _RUNNING_S - 0.1:
        assert not done, (
            f"future.done() was True {since:.2f} s after the submission of a call that runs {_RUNNING_S:g} s: "
            "done() must say the call completed, not that it was sent"
        )
        # timeout=0 polls: TimeoutError at once, as concurrent.futures.Future's does, not a wait for good.
        start = time.monotonic()
        polled = raised_by(lambda: fut.result(timeout=0), 30, "future.result(timeout=0)", catch=BaseException)
        took = time.monotonic() - start
        if start - submitted < _RUNNING_S - 0.1:  # still pending when polled
            assert isinstance(polled, _TIMEOUT_ERRORS) and took < 1.0, (
                f"future.result(timeout=0) on a pending future ended with {polled!r} after {took:.2f} s, "
                "expected TimeoutError at once"
            )
    expect_equal(result_of(fut, 60, "the future of a 1.5 s call"), [(r, tag) for r in range(world_size)], "result()")
    assert fut.done(), "future.done() is False after result() returned"

    message = f"boom-{token()}"
    bad = one_future(
        executor.collective_rpc(probes.raise_on_rank, args=(world_size - 1, message), non_block=True), "non_block"
    )
    raised = raised_by(bad.result, 60, "result() of the future of a call that raises on a rank")
    if raised is None or message not in str(raised):
        blocked_by("C6", f"result() of a call that raised {message!r} on rank {world_size - 1} gave {raised!r}")
    for call, wait in (("exception()", bad.exception), ("exception(timeout=30)", lambda: bad.exception(timeout=30))):
        got = bounded(wait, 60, f"future.{call} of a failed call")
        assert isinstance(got, BaseException) and message in str(got), (
            f"future.{call} of a call that failed with {message!r} returned {got!r}, expected that error "
            "(result() raised it)"
        )
    assert bad.done(), "future.done() is False for a call that failed"

    # done() alone, nothing else waiting on the future: true once the call completed.
    quick = one_future(executor.collective_rpc(probes.rank, non_block=True), "non_block")
    polled_s = 10 * load_scale()
    assert wait_until(quick.done, polled_s, interval=0.01), (
        f"future.done() stayed False for {polled_s:.0f} s after a call that completes at once, polled with "
        "nothing else waiting on the future: done() must say the call completed"
    )
    expect_equal(result_of(quick, 60, "the polled future"), list(range(world_size)), "result() of the polled future")


def _record(lock: threading.Lock, order: list[int], i: int, _future: Any) -> None:
    with lock:
        order.append(i)


@pytest.mark.harness_clause("C5")
def test_c5_a_later_future_completes_the_earlier_ones_first(executor: Any, world_size: int) -> None:
    order: list[int] = []
    lock = threading.Lock()
    futures = []
    for i in range(5):
        fut = one_future(
            executor.collective_rpc(probes.sleep_then_echo, args=(0.1, i), non_block=True), "non_block=True"
        )
        fut.add_done_callback(functools.partial(_record, lock, order, i))
        futures.append(fut)
    expect_equal(result_of(futures[-1], _WAIT_S, "future 4"), [(r, 4) for r in range(world_size)], "last future")
    for i, fut in enumerate(futures):
        assert fut.done(), f"future {i} is not done after the later future 4 completed"
        expect_equal(result_of(fut, _WAIT_S, f"future {i}"), [(r, i) for r in range(world_size)], f"future {i}")
    # Callbacks (C21's) may run on a thread of the backend's, a little later:
    # only the order of those that ran counts here.
    with lock:
        expect_equal(order, sorted(order), "completion order of futures 0..4")


@pytest.mark.harness_clause("C5")
def test_c5_blocking_calls_take_nothing_from_pending_futures(executor: Any, world_size: int) -> None:
    pending = one_future(
        executor.collective_rpc(probes.sleep_then_echo, args=(0.3, "pending"), non_block=True), "non_block=True"
    )
    expect_equal(
        bounded(
            lambda: executor.collective_rpc(probes.echo_value, args=("blocking",)),
            _WAIT_S,
            "a blocking call while a future is pending",
        ),
        ["blocking"] * world_size,
        "blocking call issued while a future was pending",
    )
    expect_equal(
        result_of(pending, _WAIT_S, "the pending future"), [(r, "pending") for r in range(world_size)], "pending future"
    )


@pytest.mark.harness_clause("C5")
def test_c5_hundreds_of_calls_in_flight_all_complete(executor: Any, world_size: int) -> None:
    # Large-ish replies, never collected until the end: they back up any
    # reply channel, which must not deadlock the requests behind them.
    n = 300
    blob = b"r" * 20_000
    futures: list[Any] = []

    def put_in_flight() -> None:
        for i in range(n):
            fut = executor.collective_rpc(probes.echo_value, args=((i, blob),), non_block=True)
            futures.append(one_future(fut, "non_block=True"))

    # The suite's own waits, on progress (calls put in flight, then futures
    # done), stretched with the load: a backend that stops is told in seconds.
    scale = load_scale()
    stall_s, limit_s = STALL_S * scale, 120 * scale
    # Bounded too: a backend that makes a new call wait for a reply the caller
    # has not read yet deadlocks here, at the call, not at a result().
    bounded_while_progressing(
        put_in_flight, lambda: f"{len(futures)} of {n} in flight", stall_s, limit_s,
        f"putting {n} calls in flight, none of their replies read yet",
    )  # fmt: skip
    bounded_while_progressing(
        futures[-1].result, lambda: f"{sum(f.done() for f in futures)} of {n} done", stall_s, limit_s,
        f"future {n - 1} of {n}: result()",
    )  # fmt: skip
    for i in reversed(range(n)):
        what = f"future {i} of {n}"
        expect_equal(result_of(futures[i], _WAIT_S, what), [(i, blob)] * world_size, what)


class _Callbacks:
    """Records the futures a done-callback was called with, and signals each call."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self._lock = threading.Lock()
        self._ran = threading.Condition(self._lock)

    def __call__(self, future: Any) -> None:
        with self._ran:
            self.seen.append(future)
            self._ran.notify_all()

    def wait(self, n: int, seconds: float) -> list[Any]:
        """The calls so far, once there are ``n`` (or ``seconds`` passed); then a short
        look for one call too many. A backend may complete futures, and run their
        callbacks, on a thread of its own, a little after ``result()`` returned."""
        with self._ran:
            self._ran.wait_for(lambda: len(self.seen) >= n, seconds)
        time.sleep(0.2)
        with self._lock:
            return list(self.seen)


def _once_with(seen: list[Any], future: Any) -> bool:
    """Called once, with that very future: not a copy, a wrapper or another future
    equal to it (``==`` is whatever the object says it is; ``is`` is not)."""
    return len(seen) == 1 and seen[0] is future


@pytest.mark.harness_clause("C21")
def test_c21_done_callback_runs_once_with_its_future(executor: Any) -> None:
    callback = _Callbacks()
    fut = one_future(executor.collective_rpc(probes.sleep, args=(0.2,), non_block=True), "non_block=True")
    fut.add_done_callback(callback)
    result_of(fut, _WAIT_S, "the future")
    seen = callback.wait(1, _CALLBACK_S)
    assert _once_with(seen, fut), (
        f"the callback was called with {seen!r} within {_CALLBACK_S:g} s of the future completing, "
        "expected once, with the future itself"
    )
    # Added after completion: runs with the future too.
    late = _Callbacks()
    fut.add_done_callback(late)
    seen = late.wait(1, _CALLBACK_S)
    assert _once_with(seen, fut), (
        f"a callback added after completion was called with {seen!r}, expected once, with the future"
    )


@pytest.mark.harness_clause("C21")
def test_c21_done_callback_runs_when_a_later_call_completes_it(executor: Any) -> None:
    callback = _Callbacks()
    fut = one_future(executor.collective_rpc(probes.sleep, args=(0.1,), non_block=True), "non_block=True")
    fut.add_done_callback(callback)
    for _ in range(2):
        bounded(lambda: executor.collective_rpc(probes.rank), _WAIT_S, "a blocking call after a pending one")
    # The blocking calls completed the earlier future (C5): its callback runs
    # though nobody asked for the future's result.
    seen = callback.wait(1, _CALLBACK_S)
    assert _once_with(seen, fut), (
        f"after later calls completed the future, the callback was called with {seen!r} "
        f"(waited {_CALLBACK_S:g} s), expected once, with the future"
    )
    result_of(fut, _WAIT_S, "the future")
    seen = callback.wait(1, 0)
    assert _once_with(seen, fut), f"the callback ran {len(seen)} times, expected once"


# ---- with device work in flight (the GPU tier runs the same checks on CUDA) ----


@pytest.mark.harness_clause("C4")
def test_c4_the_future_of_a_call_with_kernels_queued_resolves_to_their_values(
    executor: Any, world_size: int, executor_config: Any
) -> None:
    _work_in_flight.check_one_future(executor, world_size, executor_config.device)


@pytest.mark.harness_clause("C5")
def test_c5_futures_of_calls_with_kernels_queued_complete_in_order_with_their_values(
    executor: Any, world_size: int, executor_config: Any
) -> None:
    _work_in_flight.check_order(executor, world_size, executor_config.device)


@pytest.mark.harness_clause("C21")
def test_c21_a_callback_added_while_kernels_run_sees_their_values(
    executor: Any, world_size: int, executor_config: Any
) -> None:
    _work_in_flight.check_callback(executor, world_size, executor_config.device)
