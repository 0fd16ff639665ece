"""C8, C13: a worker that dies, a caller that dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness import ExecutorConfig, leaks, probes
from harness.conformance._checks import not_applicable, process_gone, wait_until

pytestmark = pytest.mark.timeout(300)


# What a stub or a broken check_health() raises; a health check names the failure.
_NOT_A_HEALTH_CHECK = (NotImplementedError, AttributeError, TypeError)


@pytest.mark.clause("C8")
def test_c8_a_dead_worker_fails_pending_and_later_calls_and_runs_callbacks_once(executor: Any, world_size: int) -> None:
    calls: list[int] = []
    lock = threading.Lock()

    def on_failure() -> None:
        with lock:
            calls.append(1)

    executor.register_failure_callback(on_failure)
    executor.check_health()  # healthy: must not raise
    pids = [int(p) for p in executor.collective_rpc(probes.pid)]
    victim = pids[-1]
    if victim == os.getpid():
        pytest.skip("the last rank runs in the caller's process: it cannot die alone")
    pending = executor.collective_rpc(probes.sleep, args=(60.0,), non_block=True)
    time.sleep(0.3)
    os.kill(victim, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - any error, as long as it comes in time
        pending.result(timeout=30)
    took = time.monotonic() - start
    assert took <= 10, f"the pending call failed {took:.1f} s after the worker died, expected within 10 s"
    start = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017
        executor.collective_rpc(probes.rank, timeout=30)
    took = time.monotonic() - start
    assert took <= 10, f"a later call failed after {took:.1f} s, expected within 10 s"
    with pytest.raises(Exception) as info:
        executor.check_health()
    assert not isinstance(info.value, _NOT_A_HEALTH_CHECK), f"check_health() raised {info.value!r}"
    assert wait_until(lambda: len(calls) >= 1, 10), "no failure callback ran within 10 s of the death"
    with pytest.raises(Exception):  # noqa: B017
        executor.collective_rpc(probes.rank, timeout=30)
    executor.shutdown()  # idempotent; the fixture's own shutdown follows
    time.sleep(0.5)
    assert len(calls) == 1, f"the failure callback ran {len(calls)} times, expected once"


@pytest.mark.clause("C13")
def test_c13_every_process_the_executor_started_exits_when_the_caller_is_sigkilled(
    backend: Any, executor_config: ExecutorConfig, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pids.json"
    # The caller's tag marks every process started from it, wherever it goes
    # (a new session, a double fork); its process tree is taken before the kill.
    tag = leaks.new_tag()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **{leaks.TAG_ENV: tag})
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.conformance._orphan_driver",
            backend.name,
            str(executor_config.world_size),
            executor_config.start_method,
            str(pid_file),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    found: dict[int, set[str]] = {}

    def add(pids: set[int] | list[int], how: str) -> None:
        for pid in pids:
            found.setdefault(pid, set()).add(how)

    try:
        started = wait_until(lambda: pid_file.exists() or driver.poll() is not None, executor_config.init_timeout_s)
        assert started and pid_file.exists(), f"the caller process did not start its workers (exit {driver.poll()})"
        add(json.loads(pid_file.read_text()), "a worker")
        add(leaks.started_by(driver.pid, None), "in the caller's process tree")
        add(leaks.tagged(tag), "carries the caller's tag")
    finally:
        driver.kill()
        driver.wait(timeout=30)
    killed = time.monotonic()
    add(leaks.tagged(tag), "carries the caller's tag")  # started between the look and the kill
    found.pop(driver.pid, None)
    if not found:
        not_applicable("the executor started no process: its ranks run in the caller's process")
    # One deadline for all: every process must be gone 10 s after the kill.
    wait_until(lambda: all(process_gone(p) for p in found), max(0.0, 10 - (time.monotonic() - killed)))
    alive = {p: leaks.describe(p) for p in found if not process_gone(p)}
    for p in alive:  # do not leave them to the next test
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    described = [f"{what} [{', '.join(sorted(found[p]))}]" for p, what in alive.items()]
    assert not alive, f"10 s after their caller was SIGKILLed, processes it started still run: {'; '.join(described)}"
