"""C1-C5, C21: what calls return, and how futures behave."""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest

from harness import probes
from harness.conformance._checks import expect_equal, token

pytestmark = pytest.mark.timeout(300)


@pytest.mark.clause("C1")
def test_c1_results_are_in_rank_order_whatever_order_ranks_finish(executor: Any, world_size: int) -> None:
    # Rank r sleeps (n-1-r) * step: the highest rank answers first.
    got = executor.collective_rpc(probes.finish_in_reverse, args=(0.3,))
    expect_equal(got, list(range(world_size)), "collective_rpc(finish_in_reverse)")


@pytest.mark.clause("C1")
def test_c1_blocking_call_returns_one_entry_per_rank(executor: Any, world_size: int) -> None:
    got = executor.collective_rpc(probes.rank)
    assert isinstance(got, list), f"got {type(got).__name__}, expected list [collective_rpc(rank)]"
    expect_equal(got, list(range(world_size)), "collective_rpc(rank)")


@pytest.mark.clause("C2")
def test_c2_unique_reply_rank_returns_that_rank_alone(executor: Any, world_size: int) -> None:
    for r in range(world_size):
        expect_equal(executor.collective_rpc(probes.rank, unique_reply_rank=r), r, f"unique_reply_rank={r}")


@pytest.mark.clause("C2")
@pytest.mark.parametrize("where", ["world_size", "-1"])
def test_c2_out_of_range_rank_is_value_error_before_sending(executor: Any, world_size: int, where: str) -> None:
    bad = world_size if where == "world_size" else -1
    executor.collective_rpc(probes.count_calls, args=("c2",))
    with pytest.raises(ValueError):
        executor.collective_rpc(probes.count_calls, args=("c2",), unique_reply_rank=bad)
    # Nothing reached the workers: the counter moved once more, not twice.
    expect_equal(
        executor.collective_rpc(probes.count_calls, args=("c2",)),
        [2] * world_size,
        f"calls seen by workers after unique_reply_rank={bad}",
    )


_ARGS = (1, -(2**70), 3.5, "ünïcode", b"\x00bytes", None, [1, [2, (3,)]], {"k": {"n": [1, 2]}})
_KWARGS = {"alpha": 1, "beta": ("x", b"y"), "gamma": None, "delta": {"nested": [1.25]}}


@pytest.mark.clause("C3")
def test_c3_args_and_kwargs_reach_a_callable_unchanged(executor: Any, world_size: int) -> None:
    got = executor.collective_rpc(probes.echo, args=_ARGS, kwargs=_KWARGS)
    expect_equal(got, [(r, _ARGS, _KWARGS) for r in range(world_size)], "collective_rpc(echo, args, kwargs)")


@pytest.mark.clause("C3")
def test_c3_args_and_kwargs_reach_a_string_method_unchanged(executor: Any, world_size: int) -> None:
    executor.collective_rpc(probes.install_echo_method)
    got = executor.collective_rpc(probes.ECHO_METHOD, args=_ARGS, kwargs=_KWARGS)
    expect_equal(got, [(r, _ARGS, _KWARGS) for r in range(world_size)], f"collective_rpc({probes.ECHO_METHOD!r})")


def _is_one_future(obj: Any) -> bool:
    return all(callable(getattr(obj, name, None)) for name in ("result", "done", "exception", "add_done_callback"))


@pytest.mark.clause("C4")
@pytest.mark.parametrize("unique", [False, True], ids=["all-ranks", "unique-reply"])
def test_c4_non_block_returns_one_future_resolving_to_the_blocking_result(
    executor: Any, world_size: int, unique: bool
) -> None:
    kw = {"unique_reply_rank": world_size - 1} if unique else {}
    tag = token()
    blocking = executor.collective_rpc(probes.echo, args=(tag,), **kw)
    fut = executor.collective_rpc(probes.echo, args=(tag,), non_block=True, **kw)
    assert not isinstance(fut, (list, tuple)), f"got a {type(fut).__name__} of futures, expected one future"
    assert _is_one_future(fut), f"got {type(fut).__name__}, expected a concurrent.futures.Future"
    expect_equal(fut.result(timeout=60), blocking, "non_block future result vs blocking result")
    assert fut.done() and fut.exception() is None


def _record(lock: threading.Lock, order: list[int], i: int, _future: Any) -> None:
    with lock:
        order.append(i)


@pytest.mark.clause("C5")
def test_c5_a_later_future_completes_the_earlier_ones_first(executor: Any, world_size: int) -> None:
    order: list[int] = []
    lock = threading.Lock()
    futures = []
    for i in range(5):
        fut = executor.collective_rpc(probes.sleep_then_echo, args=(0.1, i), non_block=True)
        fut.add_done_callback(functools.partial(_record, lock, order, i))
        futures.append(fut)
    expect_equal(futures[-1].result(timeout=60), [(r, 4) for r in range(world_size)], "last future")
    for i, fut in enumerate(futures):
        assert fut.done(), f"future {i} is not done after the later future 4 completed"
        expect_equal(fut.result(timeout=0), [(r, i) for r in range(world_size)], f"future {i}")
    expect_equal(order, sorted(order), "completion order of futures 0..4")


@pytest.mark.clause("C5")
def test_c5_blocking_calls_take_nothing_from_pending_futures(executor: Any, world_size: int) -> None:
    pending = executor.collective_rpc(probes.sleep_then_echo, args=(0.3, "pending"), non_block=True)
    expect_equal(
        executor.collective_rpc(probes.echo_value, args=("blocking",)),
        ["blocking"] * world_size,
        "blocking call issued while a future was pending",
    )
    expect_equal(pending.result(timeout=60), [(r, "pending") for r in range(world_size)], "pending future")


@pytest.mark.clause("C5")
def test_c5_hundreds_of_calls_in_flight_all_complete(executor: Any, world_size: int) -> None:
    # Large-ish replies, never collected until the end: they back up any
    # reply channel, which must not deadlock the requests behind them.
    n = 300
    blob = b"r" * 20_000
    futures = [executor.collective_rpc(probes.echo_value, args=((i, blob),), non_block=True) for i in range(n)]
    for i in reversed(range(n)):
        expect_equal(futures[i].result(timeout=120), [(i, blob)] * world_size, f"future {i} of {n}")


@pytest.mark.clause("C21")
def test_c21_done_callback_runs_once_with_its_future(executor: Any) -> None:
    seen: list[Any] = []
    fut = executor.collective_rpc(probes.sleep, args=(0.2,), non_block=True)
    fut.add_done_callback(seen.append)
    fut.result(timeout=60)
    expect_equal(len(seen), 1, "callback runs")
    assert seen[0] is fut, f"callback got {seen[0]!r}, expected the future itself"
    # Added after completion: runs at once, with the future.
    late: list[Any] = []
    fut.add_done_callback(late.append)
    assert late == [fut], f"callback added after completion got {late!r}"


@pytest.mark.clause("C21")
def test_c21_done_callback_runs_when_a_later_call_completes_it(executor: Any) -> None:
    seen: list[Any] = []
    fut = executor.collective_rpc(probes.sleep, args=(0.1,), non_block=True)
    fut.add_done_callback(seen.append)
    executor.collective_rpc(probes.rank)
    executor.collective_rpc(probes.rank)
    # The blocking calls completed the earlier future: its callback ran then.
    assert seen == [fut], f"after later calls completed the future, the callback saw {seen!r}"
    fut.result(timeout=60)
    assert seen == [fut], f"the callback ran {len(seen)} times, expected once"
