"""C8, C13: a worker that dies, a caller that dies."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness import ExecutorConfig
from harness.conformance import probes
from harness.conformance._checks import (
    blocked_by,
    bounded,
    error_of,
    not_applicable,
    one_future,
    process_gone,
    wait_until,
    wait_while_progressing,
)
from harness.conformance._faults import (
    DEATH_BOUND_S,
    STUB_ERRORS,
    expect_failure,
    kill,
    kill_a_rank_inside_a_collective,
    left,
    victim,
)
from harness.conformance._orphan_driver import BACKED_UP_CALLS
from harness.conformance._workers import worker_pids
from harness.conformance.spec_bounds import judge, raised_within, wait_within, waited
from harness.system import leaks
from harness.system.load import load_scale

pytestmark = pytest.mark.timeout(300)


def _call_error(executor: Any, what: str) -> BaseException | None:
    """The error of a blocking call (no timeout: that is C7's), bounded by the suite's watchdog."""

    return raised_within(lambda: executor.collective_rpc(probes.rank), DEATH_BOUND_S, f"{what}: collective_rpc('rank')")


def _future_of(executor: Any, method: Any) -> Any:
    """The future of a non-blocking call of ``method``."""
    return one_future(executor.collective_rpc(method, non_block=True), "non_block=True")


def _expect_unhealthy(executor: Any, rank: int) -> None:
    __tracebackhide__ = True

    error = raised_within(executor.check_health, DEATH_BOUND_S, f"check_health() after rank {rank} died")
    if error is None:
        raise AssertionError(f"check_health() returned after rank {rank} died, expected it to raise")
    if isinstance(error, STUB_ERRORS):
        raise AssertionError(f"check_health() raised {error!r}: an unimplemented feature, not a health check")


class _Callbacks:
    """Several failure callbacks, each counting its own runs."""

    def __init__(self, executor: Any, count: int = 3, first_raises: bool = False) -> None:
        self._lock = threading.Lock()
        self.runs = [0] * count
        self._ran = [threading.Event() for _ in range(count)]
        #: "every registered failure callback runs exactly once": also when one of them raises.
        self._raising = 0 if first_raises else None
        for i in range(count):
            bounded(
                lambda i=i: executor.register_failure_callback(lambda: self._run(i)),  # type: ignore[misc]
                DEATH_BOUND_S,
                f"register_failure_callback(#{i + 1})",
            )

    def _run(self, i: int) -> None:
        with self._lock:
            self.runs[i] += 1
        self._ran[i].set()
        if i == self._raising:
            raise RuntimeError(f"failure callback #{i + 1} raises, as the suite's check of C8 asks it to")

    def expect_all_ran(self, died: float, rank: int, how: str) -> None:
        """Every callback has run by ``DEATH_BOUND_S`` s after the death."""
        __tracebackhide__ = True
        missing = [i + 1 for i, ran in enumerate(self._ran) if not ran.wait(left(died))]
        if missing:
            raising = "" if self._raising is None else f", callback #{self._raising + 1} raising"
            raise AssertionError(
                f"failure callbacks {missing} of {len(self._ran)} did not run within "
                f"{DEATH_BOUND_S:g} s of rank {rank}'s death ({how}{raising})" + waited(DEATH_BOUND_S)
            )
        judge(time.monotonic() - died, DEATH_BOUND_S, f"the failure callbacks after rank {rank}'s death")

    def expect_each_once(self, settle: float = 0.5, how: str = "") -> None:
        __tracebackhide__ = True
        time.sleep(settle)  # a callback run twice, late, shows by now
        wrong = {i + 1: n for i, n in enumerate(self.runs) if n != 1}
        if wrong:
            raise AssertionError(
                f"failure callbacks ran {wrong} times (callback: runs), expected each exactly once"
                + (f" overall ({how})" if how else "")
            )


@pytest.mark.harness_clause("C8")
def test_c8_a_worker_dying_mid_call_fails_pending_and_later_calls_and_runs_each_callback_once(executor: Any) -> None:
    callbacks = _Callbacks(executor)
    bounded(executor.check_health, DEATH_BOUND_S, "check_health() on a healthy executor")  # must not raise
    rank, pid = victim(executor)
    # Every pending call fails: the one running, the one queued behind it, and
    # one whose reply is narrowed to rank 0 (a rank that lives on, where it is not the victim).
    pending = [
        one_future(executor.collective_rpc(probes.sleep, args=(60.0,), non_block=True, **kw), "non_block=True")
        for kw in ({}, {}, {"unique_reply_rank": 0})
    ]
    time.sleep(0.3)  # the first call is running on every rank
    died = kill(pid)
    for i, future in enumerate(pending):
        narrowed = " (its reply narrowed to rank 0)" if i == 2 else ""
        what = f"pending call {i + 1} of {len(pending)}{narrowed} when rank {rank} (pid {pid}) was killed"
        expect_failure(error_of(future, left(died), f"{what}, due within {DEATH_BOUND_S:g} s"), what)
        judge(time.monotonic() - died, DEATH_BOUND_S, f"the failure of {what}")
    expect_failure(_call_error(executor, "a call after the death"), f"a call after rank {rank} died")
    # Every later call: a non-blocking one (its future fails), and one whose
    # argument is larger than any channel's buffer (nobody reads it on the dead rank).
    what = f"a non-blocking call after rank {rank} died"
    expect_failure(raised_within(lambda: _future_of(executor, probes.rank).result(), DEATH_BOUND_S, what), what)
    what = f"a call with a 32 MiB argument after rank {rank} died"
    large = b"\x5a" * (32 << 20)
    call = functools.partial(executor.collective_rpc, probes.payload_digest, args=(large,))
    expect_failure(raised_within(call, DEATH_BOUND_S, what), what)
    _expect_unhealthy(executor, rank)
    callbacks.expect_all_ran(died, rank, "a call was in flight")
    expect_failure(_call_error(executor, "a second call after the death"), f"a second call after rank {rank} died")
    bounded(executor.shutdown, 30, f"shutdown() after rank {rank} died")
    callbacks.expect_each_once()


@pytest.mark.harness_clause("C8")
def test_c8_a_worker_dying_while_idle_runs_each_callback_once_with_no_call_made(executor: Any) -> None:
    # The first callback raises: every other one still runs, and it runs once too.
    callbacks = _Callbacks(executor, first_raises=True)
    rank, pid = victim(executor)
    died = kill(pid)
    # Nothing is asked of the executor until the callbacks have run: it must notice the death itself.
    callbacks.expect_all_ran(died, rank, "the executor was idle, no call made")
    expect_failure(_call_error(executor, "a call after the death"), f"a call after rank {rank} died")
    _expect_unhealthy(executor, rank)
    bounded(executor.shutdown, 30, f"shutdown() after rank {rank} died")
    callbacks.expect_each_once()


@pytest.mark.harness_clause("C8")
@pytest.mark.parametrize("survivors", ["error_out", "stay_blocked"])
def test_c8_a_rank_killed_inside_a_collective_fails_the_call_and_shutdown_stays_bounded(
    executor: Any, world_size: int, tmp_path: Path, survivors: str
) -> None:
    """The others wait in an all_reduce the victim never joins. gloo fails theirs
    once the victim dies (``error_out``); NCCL leaves them blocked for good
    (``stay_blocked``, modelled on the CPU): the call must fail either way."""
    kill_a_rank_inside_a_collective(executor, world_size, tmp_path, survivors, "cpu")


def _two_victims(executor: Any, world_size: int) -> list[tuple[int, int]]:
    """(rank, pid) of the two highest ranks with a process of their own: at world
    size 3 or more a rank survives them, at 2 both ranks die."""
    pids = worker_pids(executor)
    apart = [(rank, pid) for rank, pid in enumerate(pids) if pid != os.getpid()]
    if len({pid for _, pid in apart}) < 2:
        not_applicable(f"{len(apart)} rank(s) with a process apart from the caller: two workers cannot die")
    return apart[-2:]


@pytest.mark.harness_clause("C8")
@pytest.mark.parametrize("deaths", ["at_once", "one_after_the_other"])
def test_c8_two_workers_dying_run_each_callback_exactly_once_overall(
    executor: Any, world_size: int, deaths: str
) -> None:
    """Exactly once per executor, not once per death: a second death, at the same
    moment or after the callbacks of the first ran, runs none of them again."""
    callbacks = _Callbacks(executor)
    (first, first_pid), (second, second_pid) = _two_victims(executor, world_size)
    how = f"ranks {first} and {second} killed {deaths.replace('_', ' ')}"
    died = kill(first_pid)
    if deaths == "one_after_the_other":
        callbacks.expect_all_ran(died, first, "the executor was idle, no call made")
        time.sleep(0.2)
    died = kill(second_pid)
    callbacks.expect_all_ran(died, second, how)
    _expect_unhealthy(executor, second)
    # A run per death comes as soon as the death is seen, as the first run did.
    wait_until(lambda: process_gone(second_pid), left(died))
    callbacks.expect_each_once(settle=2.0, how=how)
    bounded(executor.shutdown, 30, f"shutdown() after {how}")
    callbacks.expect_each_once(how=how)


#: What the executor is doing when its caller is SIGKILLed (harness.conformance._orphan_driver):
#: idle; a call running in every worker; hundreds of calls whose large results
#: the caller never reads, the workers blocked sending them; a worker hung in
#: native code with SIGTERM ignored.
CALLER_KILLED_WHILE = ("idle", "call_running", "replies_backed_up", "worker_hung_in_native_code")


#: replies_backed_up: how long no call may go in before the caller counts as stopped
#: (times the machine's load per CPU, up to 6).
BACKED_UP_STALL_S = 15.0
#: SPEC.md's C13 bounds: the caller's workers gone after its death; across nodes
#: (the workers' machines learn of it over the network) the longer one.
ORPHAN_BOUND_S = 10.0
ORPHAN_BOUND_NODES_S = 30.0


def _text_of(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


@pytest.mark.harness_clause("C13")
@pytest.mark.parametrize("state", CALLER_KILLED_WHILE)
def test_c13_every_process_the_executor_started_exits_when_the_caller_is_sigkilled(
    backend: Any, executor_config: ExecutorConfig, tmp_path: Path, state: str
) -> None:
    pid_file = tmp_path / "pids.json"
    # The caller's tag marks every process started from it, wherever it goes
    # (a new session, a double fork); its process tree is taken before the kill.
    tag = leaks.new_tag()
    # Its temporary files go in a folder of this test's, removed after it: a
    # SIGKILLed caller cannot remove them. (Short: it may hold unix sockets.)
    driver_tmp = tempfile.mkdtemp(prefix="c13-")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TMPDIR=driver_tmp, **{leaks.TAG_ENV: tag}
    )
    found: dict[int, set[str]] = {}
    segments: set[str] = set()

    def add(pids: set[int] | list[int], how: str) -> None:
        for pid in pids:
            found.setdefault(pid, set()).add(how)

    # Its stderr is kept: a caller that exits early says why (the file is its own once started).
    with (tmp_path / "caller.err").open("wb") as caller_err:
        driver = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.conformance._orphan_driver",
                backend.name,
                str(executor_config.world_size),
                executor_config.start_method,
                str(pid_file),
                state,
                str(executor_config.nodes),
                str(executor_config.init_timeout_s),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=caller_err,
        )
    try:
        try:
            # The caller's own start (imports, then the executor's): the suite's wait,
            # not a bound of SPEC's, so it stretches with the machine's load.
            start_s = executor_config.init_timeout_s  # stretched by the load already
            started = wait_until(lambda: pid_file.exists() or driver.poll() is not None, start_s)
            assert started and pid_file.exists(), (
                f"the caller process did not start its workers within {start_s:.0f} s (exit {driver.poll()}); "
                f"its stderr ends: {_tail(tmp_path / 'caller.err')}"
            )
            ranks = json.loads(pid_file.read_text())
            if state != "idle" and set(ranks) == {driver.pid}:
                # A call in flight would run in the caller itself, and never end.
                not_applicable("the ranks run in the caller's process: no call is in flight when it dies")
            add(ranks, "a worker")
            # Then the driver brings the executor to ``state`` (it gives up after a minute).
            reached = Path(f"{pid_file}.reached")
            if state == "replies_backed_up":
                # Waited for as long as calls keep going in: a caller whose submissions
                # stopped is told from a slow one in seconds, not at a fixed bound.
                submitted = Path(f"{pid_file}.markers") / "submitted"
                scale = load_scale()
                stall_s = BACKED_UP_STALL_S * scale
                wait_while_progressing(
                    lambda: reached.exists() or driver.poll() is not None,
                    lambda: _text_of(submitted),
                    stall_s,
                    70 * scale,
                )
                if not reached.exists() and driver.poll() is None:
                    # Hundreds of calls in flight with their replies unread are C5's to hold.
                    blocked_by(
                        "C5",
                        f"the caller could not put {BACKED_UP_CALLS} calls in flight with their replies unread "
                        f"({state}): it stopped after {_text_of(submitted) or 0}, none more for {stall_s:.0f} s",
                    )
            else:
                wait_until(lambda: reached.exists() or driver.poll() is not None, 70)
            assert reached.exists(), f"the caller process did not bring its executor to {state} (exit {driver.poll()})"
            add(leaks.started_by(driver.pid, None), "in the caller's process tree")
            add(leaks.tagged(tag), "carries the caller's tag")
        finally:
            # What the caller maps now, it cannot unlink once killed: removed after the verdict.
            segments = leaks.shm_mapped_by([driver.pid, *found])
            driver.kill()
            driver.wait(timeout=30)
        killed = time.monotonic()
        add(leaks.tagged(tag), "carries the caller's tag")  # started between the look and the kill
        found.pop(driver.pid, None)
        if not found:
            not_applicable("the executor started no process: its ranks run in the caller's process")
        # One deadline for all: every process, on every node, gone this long after the kill.
        bound = ORPHAN_BOUND_S if executor_config.nodes == 1 else ORPHAN_BOUND_NODES_S
        wait_within(lambda: all(process_gone(p) for p in found), bound, "the orphans' exit", killed)
        alive = {p: leaks.describe(p) for p in found if not process_gone(p)}
        described = [f"{what} [{', '.join(sorted(found[p]))}]" for p, what in alive.items()]
        assert not alive, (
            f"{bound:g} s after their caller was SIGKILLed ({state.replace('_', ' ')}), "
            f"processes it started still run: {'; '.join(described)}{waited(bound)}"
        )
    finally:
        # Whatever the verdict, nothing of the caller's is left to the next test.
        found.pop(driver.pid, None)
        for p in {*found, *leaks.tagged(tag)} - {os.getpid()}:
            if not process_gone(p):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, signal.SIGKILL)
        for name in segments - leaks.shm_mapped_by(leaks.tagged(tag)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")
        shutil.rmtree(driver_tmp, ignore_errors=True)


def _tail(path: Path, limit: int = 1500) -> str:
    """The end of a file the test kept (a caller's stderr), for a failure's message."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError as exc:
        return f"(unreadable: {exc})"
    return text[-limit:] if text else "(nothing)"
