"""``harness bench``'s idle figures: an executor that sits idle uses no CPU,
in the caller (C19) or in its workers, and a worker that spins while idle shows."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.contract import ExecutorConfig
from harness.executors.mp import MultiprocExecutor
from harness.perf.bench import idle_cpu
from harness.system.load import load_per_cpu, load_scale

pytestmark = pytest.mark.timeout(120)


def spinning_workers(config: ExecutorConfig) -> MultiprocExecutor:
    """``mp`` whose workers look at their ring for a minute after each call."""
    return MultiprocExecutor(config, worker_spin_s=60.0)


def test_an_idle_mp_uses_no_cpu_in_the_caller_or_the_workers() -> None:
    idle = idle_cpu("mp@start_method=fork", 2, 1.0)
    assert idle.n_descendants >= 2  # both workers were measured
    assert idle.caller < 5.0
    assert idle.descendants < 5.0


def test_workers_that_spin_while_idle_show_in_the_descendants_figure() -> None:
    idle = idle_cpu(f"{__name__}:spinning_workers@start_method=fork", 2, 1.0)
    quiet = idle_cpu("mp@start_method=fork", 2, 1.0)
    load = f"at {load_per_cpu():.1f} runnable per CPU"
    assert idle.caller < 5.0
    if idle.busiest_runnable is None or quiet.busiest_on_cpu is None:
        # No schedstat in /proc: by CPU alone. Two workers yielding in a loop on
        # two cores: well over half a core on a quiet machine; a busy one gives
        # them a share that shrinks with its load (2 % at 2.2 runnable per CPU
        # beside CI's suite), so they are judged against idle workers beside them.
        assert idle.descendants > 50.0 / load_scale() or idle.descendants > max(5 * quiet.descendants, 0.5), (
            f"spinning workers {idle.descendants:.1f} %, idle ones {quiet.descendants:.1f} %, {load}"
        )
        return
    # A spinning worker's thread is runnable throughout, whatever share of a CPU
    # the load leaves it; an idle worker's threads are on a CPU next to never.
    assert idle.busiest_runnable >= 0.9 and (idle.busiest_on_cpu or 0.0) > 0.0, (
        f"a spinning worker's busiest thread was runnable {100 * idle.busiest_runnable:.0f} % of the window, "
        f"on a CPU {100 * (idle.busiest_on_cpu or 0.0):.2f} %, {load}"
    )
    assert quiet.busiest_on_cpu < 0.05, (
        f"an idle worker's busiest thread was on a CPU {100 * quiet.busiest_on_cpu:.1f} % of the window, {load}"
    )


def test_a_busy_process_started_before_the_executor_is_not_charged_to_it() -> None:
    # A run-wide Ray cluster is such a child of the test process: CI once
    # charged its 7 % of a core to an idle mp.
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        idle = idle_cpu("mp@start_method=fork", 2, 1.0)
    finally:
        busy.kill()
        busy.wait()
    assert idle.n_descendants == 2  # the two workers, not the busy child
    assert idle.descendants < 5.0
