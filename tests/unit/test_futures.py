"""Unit tests of harness.executors.futures: FIFO completion of calls, driven by the caller.

The transport is a scripted ``receive``; time is a fake clock that advances only
when ``receive`` is asked to wait and has nothing to deliver, so timeouts are
exact and no test sleeps.
"""

from __future__ import annotations

import concurrent.futures
import threading
import types
from collections import deque
from collections.abc import Iterable
from typing import Any

import pytest

from harness.contract import ExecutorError, ExecutorShutdownError, RemoteCallError, RPCTimeoutError
from harness.executors import futures
from harness.executors.futures import CallFuture, FutureQueue, PendingCall, Reply


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class ScriptedReceive:
    """Hands out one scripted batch per call; an exception in the script is raised.
    With the script used up it "waits" out the timeout on the fake clock."""

    def __init__(self, clock: FakeClock, batches: Iterable[list[Reply] | BaseException] = ()) -> None:
        self.clock = clock
        self.script: deque[list[Reply] | BaseException] = deque(batches)
        self.timeouts: list[float | None] = []

    def add(self, *batches: list[Reply] | BaseException) -> None:
        self.script.extend(batches)

    def __call__(self, timeout: float | None) -> list[Reply]:
        self.timeouts.append(timeout)
        if self.script:
            item = self.script.popleft()
            if isinstance(item, BaseException):
                raise item
            return list(item)
        if timeout is None:
            raise AssertionError("receive(None) with nothing scripted: the test would hang here")
        assert timeout >= 0
        self.clock.now += timeout
        return []


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(futures, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


@pytest.fixture
def receive(clock: FakeClock) -> ScriptedReceive:
    return ScriptedReceive(clock)


@pytest.fixture
def queue(receive: ScriptedReceive) -> FutureQueue:
    return FutureQueue(receive)


def _call(
    queue: FutureQueue,
    method: str = "m",
    world_size: int = 2,
    unique_reply_rank: int | None = None,
    timeout: float | None = None,
) -> PendingCall:
    return queue.new_call(method, world_size, unique_reply_rank, timeout)


def _replies(call: PendingCall, values: list[Any]) -> list[Reply]:
    return [Reply(rank, call.call_id, value) for rank, value in enumerate(values)]


def _settled(f: concurrent.futures.Future[Any]) -> bool:
    return concurrent.futures.Future.done(f)


# --------------------------------------------------------------------------- order


def test_later_result_completes_earlier_calls_first_each_with_its_own_result(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    calls = [_call(queue, f"m{i}") for i in range(3)]
    order: list[int] = []
    for i, c in enumerate(calls):
        c.future.add_done_callback(lambda _f, i=i: order.append(i))
    # Every reply arrives, latest call first.
    receive.add([r for c in reversed(calls) for r in _replies(c, [f"{c.call_id}/0", f"{c.call_id}/1"])])
    assert calls[2].future.result() == [f"{calls[2].call_id}/0", f"{calls[2].call_id}/1"]
    assert order == [0, 1, 2]
    for c in calls:
        assert _settled(c.future)
        assert c.future.result() == [f"{c.call_id}/0", f"{c.call_id}/1"]
    assert len(queue) == 0
    assert receive.timeouts == [None]


def test_a_complete_later_call_waits_for_an_incomplete_earlier_one(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    first, second = _call(queue, "first"), _call(queue, "second")
    receive.add([*_replies(second, ["s0", "s1"]), Reply(0, first.call_id, "f0")])
    assert not second.future.done()  # complete, but behind the first call
    assert not _settled(first.future)
    receive.add([Reply(1, first.call_id, "f1")])
    assert second.future.result() == ["s0", "s1"]
    assert first.future.result() == ["f0", "f1"]


def test_results_are_in_rank_order_whatever_the_arrival_order(queue: FutureQueue, receive: ScriptedReceive) -> None:
    c = _call(queue, world_size=4)
    receive.add([Reply(3, c.call_id, 30), Reply(1, c.call_id, 10)], [Reply(0, c.call_id, 0), Reply(2, c.call_id, 20)])
    assert c.future.result() == [0, 10, 20, 30]


def test_hundreds_in_flight(queue: FutureQueue, receive: ScriptedReceive) -> None:
    calls = [_call(queue, world_size=3) for _ in range(500)]
    for rank in (2, 0, 1):
        receive.add([Reply(rank, c.call_id, (c.call_id, rank)) for c in calls])
    assert calls[-1].future.result() == [(calls[-1].call_id, r) for r in range(3)]
    assert [c.future.result() for c in calls] == [[(c.call_id, r) for r in range(3)] for c in calls]


def test_call_ids_are_distinct_and_increasing(queue: FutureQueue) -> None:
    ids = [_call(queue).call_id for _ in range(10)]
    assert ids == sorted(set(ids))
    assert len(queue) == 10


def test_unique_reply_rank_returns_that_ranks_value_alone(queue: FutureQueue, receive: ScriptedReceive) -> None:
    c = _call(queue, world_size=3, unique_reply_rank=2)
    receive.add(_replies(c, ["zero", "one", ["two"]]))
    assert c.future.result() == ["two"]
    c0 = _call(queue, world_size=3, unique_reply_rank=0)
    receive.add(_replies(c0, [None, 1, 2]))
    assert c0.future.result() is None


def test_unique_reply_rank_still_waits_for_every_rank(queue: FutureQueue, receive: ScriptedReceive) -> None:
    c = _call(queue, world_size=2, unique_reply_rank=0)
    receive.add([Reply(0, c.call_id, "zero")])
    assert not c.future.done()
    receive.add([Reply(1, c.call_id, "one")])
    assert c.future.result() == "zero"


# --------------------------------------------------------------------------- errors


def test_error_reply_gives_remote_call_error(queue: FutureQueue, receive: ScriptedReceive) -> None:
    c = _call(queue, "explode", world_size=2)
    tb = 'Traceback (most recent call last):\n  File "w.py", line 3, in explode\nValueError: bad input 42\n'
    receive.add([Reply(0, c.call_id, "fine"), Reply(1, c.call_id, error=("ValueError", "bad input 42", tb))])
    with pytest.raises(RemoteCallError) as info:
        c.future.result()
    err = info.value
    assert isinstance(err, ExecutorError)
    assert err.rank == 1
    assert err.method == "explode"
    assert err.exc_type == "ValueError"
    assert err.remote_message == "bad input 42"
    assert err.remote_traceback == tb
    assert "rank 1" in str(err)
    assert "bad input 42" in str(err)
    assert tb in str(err)
    assert c.future.exception() is err


def test_error_reply_names_the_lowest_failing_rank_and_fails_that_call_only(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    bad, good = _call(queue, "bad", world_size=3), _call(queue, "good", world_size=3)
    receive.add(
        [
            Reply(2, bad.call_id, error=("KeyError", "two", "tb2")),
            Reply(0, bad.call_id, 0),
            Reply(1, bad.call_id, error=("OSError", "one", "tb1")),
            *_replies(good, [0, 1, 2]),
        ]
    )
    err = bad.future.exception()
    assert isinstance(err, RemoteCallError)
    assert (err.rank, err.exc_type, err.remote_traceback) == (1, "OSError", "tb1")
    assert good.future.result() == [0, 1, 2]


def test_unique_reply_rank_call_still_fails_on_another_ranks_error(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    c = _call(queue, world_size=2, unique_reply_rank=0)
    receive.add([Reply(0, c.call_id, "ok"), Reply(1, c.call_id, error=("RuntimeError", "boom", "tb"))])
    with pytest.raises(RemoteCallError, match="boom"):
        c.future.result()


# --------------------------------------------------------------------------- timeouts


def test_timed_out_call_raises_timeout_error_and_its_late_replies_are_dropped(
    queue: FutureQueue, receive: ScriptedReceive, clock: FakeClock
) -> None:
    start = clock.now
    slow = _call(queue, "slow", world_size=2, timeout=5.0)
    receive.add([Reply(0, slow.call_id, "slow0")])  # rank 1 never answers in time
    with pytest.raises(RPCTimeoutError) as info:
        slow.future.result()
    err = info.value
    assert isinstance(err, TimeoutError)
    assert isinstance(err, concurrent.futures.TimeoutError)
    assert isinstance(err, ExecutorError)
    assert "rank 1:" in str(err)
    assert "'slow'" in str(err)
    assert "5 s" in str(err)
    assert clock.now == pytest.approx(start + 5.0)  # it waited the whole timeout, no longer

    nxt = _call(queue, "next", world_size=2)
    # The late reply arrives after the next call was sent, and before its replies.
    receive.add([Reply(1, slow.call_id, "LATE")], _replies(nxt, ["n0", "n1"]))
    assert nxt.future.result() == ["n0", "n1"]
    assert len(queue) == 0
    with pytest.raises(RPCTimeoutError):  # the timed-out future keeps its outcome
        slow.future.result()


def test_late_replies_of_a_timed_out_call_never_complete_the_next_call(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    slow = _call(queue, "slow", world_size=2, timeout=1.0)
    with pytest.raises(TimeoutError, match="ranks 0, 1"):
        slow.future.result()
    nxt = _call(queue, "next", world_size=2)
    receive.add(_replies(slow, ["LATE0", "LATE1"]), [Reply(0, nxt.call_id, "n0")])
    assert not nxt.future.done()  # two late replies were not taken for this call's
    assert not nxt.future.done()
    receive.add([Reply(1, nxt.call_id, "n1")])
    assert nxt.future.result() == ["n0", "n1"]


def test_a_timeout_fails_only_its_call(queue: FutureQueue, receive: ScriptedReceive) -> None:
    slow = _call(queue, "slow", world_size=1, timeout=2.0)
    other = _call(queue, "other", world_size=1)
    receive.add([], [Reply(0, other.call_id, "o")])
    # The other call's reply may come only after the slow one's (workers answer in order).
    with pytest.raises(RPCTimeoutError):
        slow.future.result()
    receive.add([Reply(0, slow.call_id, "late")])
    assert other.future.result() == ["o"]


def test_timed_out_future_runs_its_callback_once(queue: FutureQueue, receive: ScriptedReceive) -> None:
    slow = _call(queue, world_size=1, timeout=0.5)
    seen: list[concurrent.futures.Future[Any]] = []
    slow.future.add_done_callback(seen.append)
    assert isinstance(slow.future.exception(), RPCTimeoutError)
    nxt = _call(queue, world_size=1)
    receive.add([Reply(0, slow.call_id, "late"), Reply(0, nxt.call_id, "n")])
    assert nxt.future.result() == ["n"]
    assert seen == [slow.future]


def test_zero_timeout_expires_at_once(queue: FutureQueue) -> None:
    c = _call(queue, world_size=1, timeout=0.0)
    assert isinstance(c.future.exception(), RPCTimeoutError)


def test_result_timeout_does_not_abandon_the_call(
    queue: FutureQueue, receive: ScriptedReceive, clock: FakeClock
) -> None:
    c = _call(queue, "m", world_size=2)
    start = clock.now
    with pytest.raises(TimeoutError) as info:
        c.future.result(timeout=0.25)
    assert not isinstance(info.value, RPCTimeoutError)  # the wait timed out, not the call
    assert clock.now == pytest.approx(start + 0.25)
    assert not _settled(c.future)
    assert len(queue) == 1
    with pytest.raises(TimeoutError):
        c.future.exception(timeout=0.1)
    receive.add(_replies(c, [1, 2]))
    assert c.future.result(timeout=10) == [1, 2]


def test_result_timeout_shorter_than_the_call_timeout(
    queue: FutureQueue, receive: ScriptedReceive, clock: FakeClock
) -> None:
    c = _call(queue, world_size=1, timeout=10.0)
    with pytest.raises(TimeoutError):
        c.future.result(timeout=1.0)
    assert not _settled(c.future)
    with pytest.raises(RPCTimeoutError):
        c.future.result()  # now the call's own deadline passes
    assert clock.now == pytest.approx(1000.0 + 10.0)


# --------------------------------------------------------------------------- done / callbacks


def test_done_drives_without_blocking(queue: FutureQueue, receive: ScriptedReceive, clock: FakeClock) -> None:
    c = _call(queue, world_size=2)
    start = clock.now
    assert not c.future.done()
    assert receive.timeouts == [0]
    assert clock.now == start
    receive.add([Reply(0, c.call_id, "a")])
    assert not c.future.done()
    receive.add([Reply(1, c.call_id, "b")])
    assert c.future.done()
    assert all(t == 0 for t in receive.timeouts)
    n = len(receive.timeouts)
    assert c.future.done()  # a done future asks the transport nothing
    assert len(receive.timeouts) == n
    assert c.future.result() == ["a", "b"]
    assert len(receive.timeouts) == n


def test_add_done_callback_runs_once_with_the_future(queue: FutureQueue, receive: ScriptedReceive) -> None:
    c = _call(queue, world_size=1)
    seen: list[concurrent.futures.Future[Any]] = []
    c.future.add_done_callback(seen.append)
    assert seen == []
    assert not c.future.done()
    assert seen == []
    receive.add([Reply(0, c.call_id, 7)])
    assert c.future.result() == [7]
    assert seen == [c.future]
    assert seen[0].result() == [7]
    c.future.result()
    c.future.done()
    assert seen == [c.future]  # once
    late: list[concurrent.futures.Future[Any]] = []
    c.future.add_done_callback(late.append)  # added after completion: runs at once
    assert late == [c.future]


def test_callback_sees_the_completed_future_with_its_error(queue: FutureQueue, receive: ScriptedReceive) -> None:
    c = _call(queue, "bad", world_size=1)
    seen: list[tuple[bool, BaseException | None]] = []
    c.future.add_done_callback(lambda f: seen.append((_settled(f), f.exception())))
    receive.add([Reply(0, c.call_id, error=("TypeError", "nope", "tb"))])
    c.future.exception()
    assert len(seen) == 1
    settled, exc = seen[0]
    assert settled
    assert isinstance(exc, RemoteCallError)


def test_callback_may_wait_on_a_later_future(queue: FutureQueue, receive: ScriptedReceive) -> None:
    first, second = _call(queue, world_size=1), _call(queue, world_size=1)
    results: list[Any] = []
    first.future.add_done_callback(lambda _f: results.append(second.future.result()))
    receive.add([Reply(0, first.call_id, 1)], [Reply(0, second.call_id, 2)])
    assert first.future.result() == [1]
    assert results == [[2]]


def test_futures_are_call_futures(queue: FutureQueue) -> None:
    c = _call(queue)
    assert isinstance(c.future, CallFuture)
    assert isinstance(c.future, concurrent.futures.Future)


# --------------------------------------------------------------------------- failures


def test_fail_all_fails_pending_and_later_calls(queue: FutureQueue, receive: ScriptedReceive) -> None:
    a, b = _call(queue), _call(queue, timeout=5.0)
    receive.add([Reply(0, a.call_id, "partial")])
    assert not a.future.done()
    seen: list[concurrent.futures.Future[Any]] = []
    b.future.add_done_callback(seen.append)
    died = RuntimeError("rank 1 died")
    queue.fail_all(died)
    assert queue.broken is died
    assert len(queue) == 0
    for c in (a, b):
        assert _settled(c.future)
        assert c.future.exception() is died
        with pytest.raises(RuntimeError, match="rank 1 died"):
            c.future.result()
    assert seen == [b.future]
    with pytest.raises(RuntimeError, match="rank 1 died"):
        _call(queue)
    with pytest.raises(RuntimeError, match="rank 1 died"):
        queue.pump(0)
    queue.fail_all(ValueError("second"))  # the first cause is kept
    assert queue.broken is died


def test_a_call_pending_at_shutdown_fails_with_an_error_naming_its_method(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    step, load = _call(queue, "step"), _call(queue, "load_weights")
    queue.fail_all(ExecutorShutdownError("executor was shut down"))
    with pytest.raises(ExecutorShutdownError, match=r"^collective_rpc\('step'\): executor was shut down$"):
        step.future.result()
    with pytest.raises(ExecutorShutdownError, match=r"^collective_rpc\('load_weights'\): executor was shut down$"):
        load.future.result()
    named = ExecutorShutdownError("collective_rpc('step'): the executor was shut down")
    other = FutureQueue(receive)
    kept = _call(other, "step")
    other.fail_all(named)
    assert kept.future.exception() is named, "an error that names the method already is kept as it is"


def test_fail_all_leaves_completed_and_timed_out_futures_alone(queue: FutureQueue, receive: ScriptedReceive) -> None:
    done, slow = _call(queue, world_size=1), _call(queue, world_size=1, timeout=1.0)
    receive.add([Reply(0, done.call_id, "ok")])
    assert done.future.result() == ["ok"]
    assert isinstance(slow.future.exception(), RPCTimeoutError)
    queue.fail_all(RuntimeError("dead"))
    assert done.future.result() == ["ok"]
    assert isinstance(slow.future.exception(), RPCTimeoutError)


def test_a_receive_that_raises_fails_every_pending_call(queue: FutureQueue, receive: ScriptedReceive) -> None:
    calls = [_call(queue, f"m{i}", world_size=2) for i in range(3)]
    broken = EOFError("reply pipe closed")
    receive.add([Reply(0, calls[0].call_id, "x")], broken)
    with pytest.raises(EOFError, match="reply pipe closed") as info:
        calls[1].future.result()
    assert info.value is broken
    for c in calls:
        assert _settled(c.future)
        assert c.future.exception() is broken
    assert queue.broken is broken
    with pytest.raises(EOFError):
        _call(queue)
    n = len(receive.timeouts)
    assert calls[2].future.done()
    assert len(receive.timeouts) == n  # the broken transport is not asked again


def test_done_returns_true_when_the_transport_breaks_while_it_drives(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    a, b = _call(queue), _call(queue)
    broken = ConnectionResetError("peer gone")
    receive.add(broken)
    try:
        assert a.future.done() is True
    finally:
        assert b.future.exception() is broken  # every call failed, whatever done() did


def test_exception_returns_the_error_when_the_transport_breaks_while_it_drives(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    a = _call(queue)
    broken = ConnectionResetError("peer gone")
    receive.add(broken)
    assert a.future.exception() is broken


def test_discard_forgets_a_call_that_was_never_sent(queue: FutureQueue, receive: ScriptedReceive) -> None:
    unsent = _call(queue, world_size=1)
    queue.discard(unsent)
    queue.discard(unsent)  # idempotent
    c = _call(queue, world_size=1)
    receive.add([Reply(0, c.call_id, "ok")])
    assert c.future.result() == ["ok"]


def test_reply_for_an_unknown_call_is_ignored(queue: FutureQueue, receive: ScriptedReceive) -> None:
    c = _call(queue, world_size=1)
    receive.add([Reply(0, 12345, "stray"), Reply(0, c.call_id, "mine")])
    assert c.future.result() == ["mine"]


def test_cancelled_future_does_not_break_the_queue(queue: FutureQueue, receive: ScriptedReceive) -> None:
    a, b = _call(queue, world_size=1), _call(queue, world_size=1)
    assert a.future.cancel()
    receive.add([Reply(0, a.call_id, "a"), Reply(0, b.call_id, "b")])
    assert b.future.result() == ["b"]
    with pytest.raises(concurrent.futures.CancelledError):
        a.future.result()


# --------------------------------------------------------------------------- blocking calls


def _blocking(queue: FutureQueue, world_size: int = 2, timeout: float | None = None) -> PendingCall:
    return queue.new_call("b", world_size, None, timeout, future=False)


def test_a_blocking_call_has_no_future_and_wait_returns_its_result(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    c = _blocking(queue)
    assert c.future is None
    receive.add(_replies(c, ["r0", "r1"]))
    assert queue.wait(c) == ["r0", "r1"]
    assert len(queue) == 0


def test_wait_raises_the_lowest_ranks_remote_error(queue: FutureQueue, receive: ScriptedReceive) -> None:
    c = _blocking(queue, world_size=3)
    receive.add(
        [
            Reply(2, c.call_id, error=("KeyError", "two", "tb2")),
            Reply(0, c.call_id, "fine"),
            Reply(1, c.call_id, error=("ValueError", "one", "tb1")),
        ]
    )
    with pytest.raises(RemoteCallError, match="one") as info:
        queue.wait(c)
    assert info.value.rank == 1


def test_wait_completes_earlier_calls_first(queue: FutureQueue, receive: ScriptedReceive) -> None:
    first = _call(queue, world_size=1)
    second = _blocking(queue, world_size=1)
    receive.add([Reply(0, second.call_id, "s")], [Reply(0, first.call_id, "f")])
    assert queue.wait(second) == ["s"]
    assert _settled(first.future)  # ... completed before the later call, in order
    assert first.future.result() == ["f"]


def test_a_blocking_call_times_out(queue: FutureQueue, receive: ScriptedReceive, clock: FakeClock) -> None:
    start = clock.now
    c = _blocking(queue, timeout=3.0)
    receive.add([Reply(0, c.call_id, "only rank 0")])
    with pytest.raises(RPCTimeoutError, match="rank 1:"):
        queue.wait(c)
    assert clock.now == pytest.approx(start + 3.0)


def test_wait_on_a_broken_transport_raises_its_error(queue: FutureQueue, receive: ScriptedReceive) -> None:
    c = _blocking(queue)
    broken = ConnectionError("transport gone")
    receive.add(broken)
    with pytest.raises(ConnectionError) as info:
        queue.wait(c)
    assert info.value is broken
    with pytest.raises(ConnectionError):
        _blocking(queue)  # every later call fails with it too


def test_a_pending_deadline_is_the_only_reason_to_wait_with_a_timeout(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    """While no pending call has a deadline, a blocking call waits on the transport
    without a timeout; whichever way a timed call leaves (completed, expired,
    never sent), that is so again."""
    timed = _call(queue, world_size=1, timeout=5.0)
    plain = _blocking(queue, world_size=1)
    receive.add([Reply(0, timed.call_id, "t")], [Reply(0, plain.call_id, "p")])
    assert queue.wait(plain) == ["p"]
    assert receive.timeouts[0] is not None  # the timed call was pending: wait at most its deadline
    assert receive.timeouts[1] is None  # completed: nothing to expire any more

    expired = _call(queue, world_size=1, timeout=1.0)
    assert isinstance(expired.future.exception(), RPCTimeoutError)
    unsent = _call(queue, world_size=1, timeout=1.0)
    queue.discard(unsent)
    receive.timeouts.clear()
    after = _blocking(queue, world_size=1)
    receive.add([Reply(0, expired.call_id, "late")], [Reply(0, after.call_id, "a")])
    assert queue.wait(after) == ["a"]
    assert receive.timeouts == [None, None]


# --------------------------------------------------------------------------- threads


class _BlockingReceive:
    """Delivers ``first``; the next call blocks until released, then delivers ``then``."""

    def __init__(self, first: list[Reply]) -> None:
        self.batches = [first]
        self.then: list[Reply] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, timeout: float | None) -> list[Reply]:
        if self.batches:
            return self.batches.pop()
        self.entered.set()
        self.release.wait(timeout=5)
        out, self.then = self.then, []
        return out


def test_result_of_a_completed_future_does_not_wait_for_another_threads_drive() -> None:
    receive = _BlockingReceive([])
    queue = FutureQueue(receive)
    early, late = queue.new_call("early", 1, None, None), queue.new_call("late", 1, None, None)
    receive.batches = [[Reply(0, early.call_id, "early")]]
    receive.then = [Reply(0, late.call_id, "late")]
    got: dict[str, Any] = {}
    a = threading.Thread(target=lambda: got.setdefault("late", late.future.result()), daemon=True)
    b = threading.Thread(target=lambda: got.setdefault("early", early.future.result()), daemon=True)
    a.start()
    try:
        assert receive.entered.wait(timeout=2)  # A now blocks in receive, holding the lock
        assert _settled(early.future)  # ... and has already completed the early call
        b.start()
        b.join(timeout=0.5)
        returned_while_a_waits = not b.is_alive()
    finally:
        receive.release.set()
        a.join(timeout=2)
        if b.is_alive() or b.ident is not None:
            b.join(timeout=2)
    assert not a.is_alive()
    assert not b.is_alive()
    assert got == {"early": ["early"], "late": ["late"]}
    assert returned_while_a_waits, "result() of a completed future waited for another thread's drive"


def test_two_threads_waiting_on_their_own_calls(queue: FutureQueue, receive: ScriptedReceive) -> None:
    calls = [_call(queue, world_size=1) for _ in range(2)]
    receive.add([Reply(0, c.call_id, c.call_id) for c in calls])
    out: dict[int, Any] = {}
    threads = [
        threading.Thread(target=lambda c=c: out.setdefault(c.call_id, c.future.result()), daemon=True) for c in calls
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=2)
    assert not any(t.is_alive() for t in threads)
    assert out == {c.call_id: [c.call_id] for c in calls}


def test_a_settled_call_lets_go_of_its_future_so_refcounts_alone_free_both(
    queue: FutureQueue, receive: ScriptedReceive
) -> None:
    # A call and its future that refer to each other wait for the garbage collector
    # with every reply they hold (a chaos soak saw mp's caller grow by 1 MiB per
    # 1,000 calls so); settled, the future drops its call and the cycle is gone.
    import gc
    import weakref

    call = queue.new_call("m", 2, None, None, future=True)
    future = call.future
    assert future is not None
    receive.add(_replies(call, [b"x" * 1024, b"y" * 1024]))
    assert future.result() == [b"x" * 1024, b"y" * 1024]
    gone = weakref.ref(future)
    gc.disable()
    try:
        del future, call
        assert gone() is None, "the settled future outlived its last reference: a reference cycle keeps it"
    finally:
        gc.enable()
