"""Before a batch, the runner waits for the machine's CPUs to go quiet, for a bounded time."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harness.perf import _quiet
from harness.perf._quiet import wait_for_quiet


class Machine:
    """/proc/stat as a script: each window's busy CPUs, on a fake clock."""

    def __init__(self, busy_cpus: list[float], cpus: int = 2, tick_per_s: float = 100.0, own_cpus: float = 0.0) -> None:
        self.busy_cpus = list(busy_cpus)
        self.cpus = cpus
        self.tick_per_s = tick_per_s
        #: CPUs the caller's own threads keep busy, all along (part of busy_cpus).
        self.own_cpus = own_cpus
        self.now = 0.0
        self.busy = 0.0
        self.own = 0.0
        self.total = 0.0
        self.slept: list[float] = []

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s
        load = self.busy_cpus.pop(0) if self.busy_cpus else self.own_cpus
        self.busy += load * s * self.tick_per_s
        self.own += self.own_cpus * s * self.tick_per_s
        self.total += self.cpus * s * self.tick_per_s

    def read(self) -> tuple[float, float]:
        return self.busy, self.total

    def wait(self, min_s: float = 0.05, max_s: float = 2.0) -> float:
        return wait_for_quiet(
            min_s,
            max_s,
            read=self.read,
            sleep=self.sleep,
            clock=lambda: self.now,
            cpus=self.cpus,
            own=lambda: self.own,
        )


def test_a_quiet_machine_costs_one_window_after_the_pause() -> None:
    m = Machine([2.0, 0.0])  # busy during the fixed pause only
    assert m.wait() == pytest.approx(_quiet._WINDOW_S)
    assert m.slept[0] == 0.05


def test_it_waits_while_other_processes_keep_cpus_busy() -> None:
    m = Machine([2.0] + [1.9] * 20 + [0.1])  # two spinning workers for a second, then quiet
    waited = m.wait()
    assert waited == pytest.approx(21 * _quiet._WINDOW_S)


def test_a_machine_that_never_goes_quiet_is_waited_for_at_most_the_bound() -> None:
    m = Machine([2.0] * 1000)
    waited = m.wait(min_s=0.05, max_s=0.5)
    assert waited == pytest.approx(0.45, abs=_quiet._WINDOW_S)


def test_the_callers_own_threads_do_not_keep_it_waiting() -> None:
    # A side whose caller-side thread spins beside its calls (the seed's
    # regression) never leaves the machine quiet; that thread runs during
    # the batch whatever the wait, so the wait is for other processes only.
    m = Machine([2.0] + [1.9] * 20 + [1.0] * 1000, own_cpus=1.0)  # workers spin a second, the caller's thread always
    assert m.wait() == pytest.approx(21 * _quiet._WINDOW_S)


def test_own_cpu_ticks_count_this_processs_threads() -> None:
    before = _quiet.own_cpu_ticks()
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert _quiet.own_cpu_ticks() - before >= 0.05 * os.sysconf("SC_CLK_TCK") * 0.99


def test_without_proc_stat_only_the_pause_is_taken() -> None:
    slept: list[float] = []
    assert wait_for_quiet(0.05, 2.0, read=lambda: None, sleep=slept.append, clock=lambda: 0.0) == 0.0
    assert slept == [0.05]


def test_cpu_times_reads_busy_and_total_ticks(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 20 800 30 1 2 3 0 0\ncpu0 50 2 10 400 15 0 1 1 0 0\n")
    assert _quiet.cpu_times(str(stat)) == (131.0, 961.0)
    assert _quiet.cpu_times(str(tmp_path / "missing")) is None
    stat.write_text("intr 1 2 3\n")
    assert _quiet.cpu_times(str(stat)) is None
