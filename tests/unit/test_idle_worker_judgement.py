"""C25's judgement of one rank's idle figure: CPU over the window, and a thread
that never slept."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from harness.conformance import probes
from harness.conformance.test_lifecycle import NEVER_SLEEPS_ON_CPU, _burning


def _figure(cpu_share: float, runnable: float, on_cpu: float) -> dict[str, Any]:
    now = time.time()
    return {
        "cpu_s": 2.0 * cpu_share,
        "wall_s": 2.0,
        "began": now + 3.5,
        "ended": now + 5.5,
        "arrived": now + 6.0,
        "pid": 4242,
        "busiest_runnable": runnable,
        "busiest_on_cpu": on_cpu,
        "busiest_thread": "reader",
    }


def test_a_rank_asleep_passes() -> None:
    assert _burning(0, _figure(0.001, 0.0, 0.0), time.time()) is None


def test_a_rank_over_five_percent_of_a_core_fails() -> None:
    found = _burning(1, _figure(0.08, 0.5, 0.08), time.time())
    assert found is not None and "rank 1 (pid 4242) burned 8.0 % of one core" in found


def test_a_thread_runnable_throughout_that_ran_fails_even_on_a_loaded_machine() -> None:
    # A spinner that a loaded machine gave 1 % of a core: under 5 %, yet it never slept.
    found = _burning(0, _figure(0.01, 0.99, 0.01), time.time())
    assert found is not None and "'reader' never slept" in found


def test_a_thread_counted_runnable_that_never_ran_passes() -> None:
    # What CI saw: gloo's idle thread read 99 % runnable with the whole process at
    # 0.0 % of a core (a sleeping thread the kernel had left queued).
    assert _burning(0, _figure(0.0, 0.99, 0.0), time.time()) is None


def test_the_probe_measures_a_spinning_thread_as_runnable_and_on_a_cpu() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    class _Rank:
        rank = 0

    spinner = threading.Thread(target=spin, name="spinner", daemon=True)
    spinner.start()
    try:
        probes.measure_idle_cpu(_Rank(), "unit-spin", 0.0, 0.5)
        found = probes.idle_cpu_measured(_Rank(), "unit-spin", 5.0)
    finally:
        stop.set()
        spinner.join()
    if "busiest_runnable" not in found:
        pytest.skip("this kernel's /proc has no schedstat: C25 judges by CPU alone")
    assert found["busiest_thread"].startswith("spinner")
    # Runnable throughout however loaded the machine is; on a CPU at least what C25 asks of a spinner.
    assert found["busiest_runnable"] > 0.5 and found["busiest_on_cpu"] >= NEVER_SLEEPS_ON_CPU
