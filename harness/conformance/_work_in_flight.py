"""C4, C5 and C21 with device work in flight, shared by the simulated tier (CPU)
and the GPU tier (CUDA): each call queues kernels on every rank's device and
returns a tensor computed by them, so a future that completes before its
call's work did, or hands back a tensor still being written, shows as a wrong
value rather than passing by luck of timing.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

from harness.conformance import probes
from harness.conformance._checks import bounded, expect_equal, is_one_future, one_future, result_of

# How long a future of a call with device work may take before the suite's watchdog fails the test.
_WAIT_S = 120.0

#: Kernel rounds per call: enough to keep a GPU busy for tens of milliseconds.
LAUNCHES = {"cuda": 200, "cpu": 20}


def _expect_work(got: Any, world_size: int, tag: int, launches: int, what: str) -> None:
    """``got`` is every rank's (rank, tensor) from ``probes.device_work``, each entry ``tag + launches``."""
    __tracebackhide__ = True
    if not isinstance(got, list) or len(got) != world_size:
        raise AssertionError(f"got {got!r}, expected one (rank, tensor) per rank [{what}]")
    want = float(tag + launches)
    for r, entry in enumerate(got):
        rank, tensor = entry
        expect_equal(rank, r, f"{what}: rank of entry {r}")
        wrong = (tensor != want).nonzero()
        if len(wrong):
            i = int(wrong[0])
            raise AssertionError(
                f"rank {r}: {len(wrong)} of {tensor.numel()} entries are not {want:g} (entry {i} is "
                f"{float(tensor[i]):g}): the result was taken before its kernels finished [{what}]"
            )


def check_one_future(executor: Any, world_size: int, device: str) -> None:
    """C4: the future of a call with kernels queued resolves to what the blocking call returns."""
    __tracebackhide__ = True
    n = LAUNCHES[device]
    blocking = executor.collective_rpc(probes.device_work, args=(1, n, device))
    _expect_work(blocking, world_size, 1, n, "blocking collective_rpc(device_work)")
    fut = executor.collective_rpc(probes.device_work, args=(1, n, device), non_block=True)
    assert is_one_future(fut), f"got {type(fut).__name__}, expected one concurrent.futures.Future"
    got = bounded(lambda: fut.result(timeout=_WAIT_S), _WAIT_S + 10, f"future.result(timeout={_WAIT_S:g})")
    _expect_work(got, world_size, 1, n, "non_block future of collective_rpc(device_work)")


def _record(lock: threading.Lock, order: list[int], i: int, _future: Any) -> None:
    with lock:
        order.append(i)


def check_order(executor: Any, world_size: int, device: str) -> None:
    """C5: the heaviest call first, lighter ones after: the last future's result
    completes every earlier one first, each with its own kernels' values."""
    __tracebackhide__ = True
    order: list[int] = []
    lock = threading.Lock()
    work = [LAUNCHES[device] // (i + 1) for i in range(4)]
    futures = []
    for i, n in enumerate(work):
        fut = one_future(
            executor.collective_rpc(probes.device_work, args=(10 * i, n, device), non_block=True), "non_block=True"
        )
        fut.add_done_callback(functools.partial(_record, lock, order, i))
        futures.append(fut)
    _expect_work(result_of(futures[-1], _WAIT_S, "the last future"), world_size, 30, work[-1], "the last future")
    for i, fut in enumerate(futures):
        assert fut.done(), f"future {i} is not done after the later future {len(futures) - 1} completed"
        _expect_work(result_of(fut, _WAIT_S, f"future {i}"), world_size, 10 * i, work[i], f"future {i}")
    with lock:
        expect_equal(order, sorted(order), "completion order of the futures")


def check_callback(executor: Any, world_size: int, device: str) -> None:
    """C21: a done-callback added while the kernels run is called once, with the
    future, whose result is then the kernels' values."""
    __tracebackhide__ = True
    n = LAUNCHES[device]
    seen: list[tuple[Any, Any]] = []
    ran = threading.Event()

    def callback(future: Any) -> None:
        try:
            value = future.result()  # done: no wait (and no timeout, which is C4's to check)
        except BaseException as exc:  # noqa: BLE001 - judged by the test, not lost in the backend's thread
            value = exc
        seen.append((future, value))
        ran.set()

    fut = one_future(executor.collective_rpc(probes.device_work, args=(5, n, device), non_block=True), "non_block=True")
    fut.add_done_callback(callback)
    result_of(fut, _WAIT_S, "the future")
    assert ran.wait(10), "the callback did not run within 10 s of the future completing"
    time.sleep(0.2)  # a look for a second call
    called_with = [arg for arg, _ in seen]
    assert len(seen) == 1 and seen[0][0] is fut, (
        f"the callback was called with {called_with!r}, expected once, with the future {fut!r}"
    )
    _expect_work(seen[0][1], world_size, 5, n, "the future's result, read inside its done-callback")
