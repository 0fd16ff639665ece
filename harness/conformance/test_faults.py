"""C8, C13: a worker that dies, a caller that dies."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from harness import ExecutorConfig, probes
from harness.conformance._checks import process_gone, wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.mark.clause("C8")
def test_c8_a_dead_worker_fails_pending_and_later_calls_and_runs_callbacks_once(executor: Any, world_size: int) -> None:
    calls: list[int] = []
    lock = threading.Lock()

    def on_failure() -> None:
        with lock:
            calls.append(1)

    executor.register_failure_callback(on_failure)
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
    with pytest.raises(Exception):  # noqa: B017
        executor.check_health()
    assert wait_until(lambda: len(calls) >= 1, 10), "no failure callback ran within 10 s of the death"
    with pytest.raises(Exception):  # noqa: B017
        executor.collective_rpc(probes.rank, timeout=30)
    time.sleep(0.5)
    assert len(calls) == 1, f"the failure callback ran {len(calls)} times, expected once"


@pytest.mark.clause("C13")
def test_c13_workers_exit_when_the_caller_is_sigkilled(backend: Any, executor_config: ExecutorConfig) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.conformance._orphan_driver",
            backend.name,
            str(executor_config.world_size),
            executor_config.start_method,
        ],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        line = driver.stdout.readline() if driver.stdout else ""
        assert line, f"the caller process exited with {driver.wait(timeout=30)} before starting its workers"
        pids = [p for p in json.loads(line) if p != driver.pid]
    finally:
        driver.kill()
        driver.wait(timeout=30)
        if driver.stdout:
            driver.stdout.close()
    alive = [p for p in pids if not wait_until(functools.partial(process_gone, p), 10)]
    for p in alive:  # do not leave them to the next test
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not alive, f"workers {alive} still run 10 s after their caller was SIGKILLed"
