"""What C8's checks share across tiers: the bound, finding and killing a rank, and
a rank killed while the others wait for it inside a collective (gloo on the CPU,
NCCL on GPUs)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from harness.conformance import probes, spec_bounds
from harness.conformance._checks import bounded, not_applicable, wait_until
from harness.conformance._markers import names_in
from harness.conformance._workers import worker_pids

#: SPEC.md's C8 bound: a death fails calls and runs the callbacks within this.
DEATH_BOUND_S = 10.0
# What a stub or a half-written backend raises: not a call failing because a worker died.
STUB_ERRORS = (NotImplementedError, AttributeError, TypeError)


def victim(executor: Any) -> tuple[int, int]:
    """(rank, pid) of the highest rank with a process of its own: the one to kill."""
    pids = worker_pids(executor)
    apart = [(rank, pid) for rank, pid in enumerate(pids) if pid != os.getpid()]
    if not apart:
        not_applicable("every rank runs in the caller's process: no worker can die apart from the caller")
    return apart[-1]


def kill(pid: int) -> float:
    """SIGKILL ``pid``; the moment of its death."""
    os.kill(pid, signal.SIGKILL)
    return time.monotonic()


def left(died: float) -> float:
    """Seconds left of C8's bound since the death (stretched with the machine's load)."""
    return spec_bounds.left(died, DEATH_BOUND_S)


def expect_failure(error: BaseException | None, what: str) -> None:
    """``error`` is a call failing, as C8 asks: not a success, not a stub's error."""
    __tracebackhide__ = True
    if error is None:
        raise AssertionError(f"{what} succeeded, expected it to fail because a worker died")
    if isinstance(error, STUB_ERRORS):
        raise AssertionError(f"{what} raised {error!r}: an unimplemented feature, not a failure from the death")


def kill_a_rank_inside_a_collective(
    executor: Any, world_size: int, tmp_path: Path, survivors: str, device: str
) -> tuple[int, int]:
    """The others wait in an all_reduce on ``device`` that the victim never joins;
    the victim is killed, and the call must fail within ``DEATH_BOUND_S`` and
    ``shutdown()`` stay bounded. ``survivors``: ``error_out`` lets gloo fail the
    survivors' all_reduce, ``stay_blocked`` keeps them blocked for good, as NCCL
    does. Returns the victim's (rank, pid)."""
    __tracebackhide__ = True
    if world_size < 2:
        not_applicable("one rank: there is no other rank to block in a collective")
    rank, pid = victim(executor)
    markers = tmp_path / "in-collective"
    markers.mkdir()
    pids = worker_pids(executor)  # now: once the collective runs, the executor answers nothing else
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            executor.collective_rpc(
                probes.all_reduce_without_rank, args=(rank, str(markers), survivors == "stay_blocked", device)
            )
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the outcome under test
            outcome.append(exc)

    caller = threading.Thread(target=call, name="harness-c8-collective", daemon=True)
    caller.start()
    arrived = wait_until(lambda: len(names_in(markers, pids)) == world_size or bool(outcome), 60)
    reached = sorted(names_in(markers, pids))
    assert arrived and not outcome, f"the ranks did not all reach the collective within 60 s (got {reached}, {outcome})"
    time.sleep(0.5)  # the other ranks are now blocked inside the all_reduce
    died = kill(pid)
    caller.join(left(died))
    assert not caller.is_alive(), (
        f"the call whose collective rank {rank} (pid {pid}) left did not end within "
        f"{DEATH_BOUND_S:g} s of the death (the other ranks: {survivors.replace('_', ' ')})"
        + spec_bounds.waited(DEATH_BOUND_S)
    )
    spec_bounds.judge(time.monotonic() - died, DEATH_BOUND_S, f"the call's failure after rank {rank} died")
    expect_failure(outcome[0], f"the call whose collective rank {rank} left")
    bounded(executor.shutdown, 30, f"shutdown() after rank {rank} died inside a collective")
    return rank, pid
