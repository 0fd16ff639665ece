"""C6, C7, C20: worker exceptions, timeouts, bad input."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

from harness import ExecutorConfig, leaks, probes
from harness.conformance._checks import expect_equal, token, within

pytestmark = pytest.mark.timeout(300)


@pytest.mark.clause("C6")
def test_c6_worker_exception_fails_that_call_with_its_message(executor: Any, world_size: int) -> None:
    message = f"boom-{token()}"
    with pytest.raises(Exception) as info:
        executor.collective_rpc(probes.raise_on_rank, args=(world_size - 1, message))
    assert message in str(info.value), f"got {info.value!r}, expected the worker's message {message!r}"
    expect_equal(executor.collective_rpc(probes.rank), list(range(world_size)), "the call after the failure")


@pytest.mark.clause("C6")
def test_c6_non_block_worker_exception_fails_only_its_future(executor: Any, world_size: int) -> None:
    message = f"boom-{token()}"
    bad = executor.collective_rpc(probes.raise_on_rank, args=(0, message), non_block=True)
    good = executor.collective_rpc(probes.echo_value, args=("fine",), non_block=True)
    exc = bad.exception(timeout=60)
    assert exc is not None and message in str(exc), f"got {exc!r}, expected the worker's message {message!r}"
    expect_equal(good.result(timeout=60), ["fine"] * world_size, "the future after the failed one")


@pytest.mark.clause("C7")
def test_c7_timeout_raises_in_time_and_no_late_reply_reaches_a_later_call(executor: Any, world_size: int) -> None:
    slow, t = 4.0, 1.0
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        executor.collective_rpc(probes.sleep_on_rank_then, args=(world_size - 1, slow, "late"), timeout=t)
    took = time.monotonic() - start
    assert took <= t + 2, f"TimeoutError after {took:.1f} s, expected within {t + 2:g} s"
    # Later calls either get their own result, or all fail with an error:
    # never the late "late" reply of the timed-out call.
    outcomes: list[tuple[str, str]] = []
    deadline = time.monotonic() + slow + 10
    while time.monotonic() < deadline and len(outcomes) < 4:
        tag = token()
        try:
            got = executor.collective_rpc(probes.echo_value, args=(tag,), timeout=slow + 10)
        except Exception as exc:  # noqa: BLE001 - the clause allows failing every later call
            outcomes.append(("error", repr(exc)))
            continue
        expect_equal(got, [tag] * world_size, "a call after a timed-out call")
        outcomes.append(("ok", tag))
        time.sleep(0.5)
    kinds = {k for k, _ in outcomes}
    assert len(kinds) == 1, f"after a timeout, later calls must all work or all fail; got {outcomes}"
    if kinds == {"error"}:
        for _, text in outcomes:
            assert text.strip(), "the error of a call after a timeout must say what is wrong"


@pytest.mark.clause("C7")
def test_c7_non_block_timeout_fails_the_future(executor: Any, world_size: int) -> None:
    fut = executor.collective_rpc(probes.sleep_on_rank, args=(0, 4.0), timeout=1.0, non_block=True)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        fut.result(timeout=30)
    took = time.monotonic() - start
    assert took <= 3.0, f"the future's TimeoutError came after {took:.1f} s, expected within 3 s"


@pytest.mark.clause("C20")
def test_c20_world_size_below_one_is_value_error(backend: Any, executor_config: ExecutorConfig) -> None:
    with pytest.raises(ValueError, match="world_size"):
        ExecutorConfig(world_size=0)
    # The backend itself must refuse it too, not rely on the config's own check.
    cfg = dataclasses.replace(executor_config)
    object.__setattr__(cfg, "world_size", 0)
    before = leaks.baseline()
    with pytest.raises(ValueError, match="world_size"):
        backend.factory(cfg)
    problems = leaks.wait_clean(before, timeout=10)
    assert not problems, "after refusing world_size=0: " + "; ".join(problems)


@pytest.mark.clause("C20")
def test_c20_unknown_method_name_is_named_in_the_error(executor: Any, world_size: int) -> None:
    name = f"no_such_method_{token()}"
    with pytest.raises(Exception) as info:
        executor.collective_rpc(name)
    assert name in str(info.value), f"got {info.value!r}, expected an error naming {name!r}"
    expect_equal(executor.collective_rpc(probes.rank), list(range(world_size)), "the call after")


@pytest.mark.clause("C20")
def test_c20_unpicklable_argument_raises_at_the_call_in_the_caller(executor: Any, world_size: int) -> None:
    # non_block=True: the error must come from collective_rpc itself, not through a future.
    with within(30, "rejecting an unpicklable argument"), pytest.raises(Exception) as info:
        executor.collective_rpc(probes.echo, args=(threading.Lock(),), non_block=True)
    assert "lock" in str(info.value).lower() or "pickl" in str(info.value).lower(), (
        f"got {info.value!r}, expected an error about the unpicklable argument"
    )
    expect_equal(executor.collective_rpc(probes.rank), list(range(world_size)), "the call after")


@pytest.mark.clause("C20")
def test_c20_unpicklable_result_is_an_error_and_the_executor_stays_usable(executor: Any, world_size: int) -> None:
    with within(60, "an unpicklable result"), pytest.raises(Exception) as info:
        executor.collective_rpc(probes.unpicklable_result, timeout=60)
    assert not isinstance(info.value, TimeoutError), f"got {info.value!r}, expected an error, not a timeout"
    expect_equal(executor.collective_rpc(probes.rank), list(range(world_size)), "the call after")
