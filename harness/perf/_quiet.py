"""Waiting for a quiet machine before a batch is measured.

Some executors keep their workers spinning long after their last call (vLLM's
workers poll their queue for 1 s). In an A/B run both sides' executors are
alive, so a batch measured right after the other side's shares the cores with
those spinning workers, and only that side pays for it. Before each batch the
runner therefore waits until the machine's CPUs have gone quiet, for a bounded
time: on a machine that never goes quiet (another job), it measures anyway.

Busy time is read from ``/proc/stat`` (Linux); elsewhere only the fixed pause
is taken.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

__all__ = ["QUIET_CPUS", "cpu_times", "wait_for_quiet"]

#: Quiet: fewer CPUs than this busy on average over a window (the caller sleeps meanwhile).
QUIET_CPUS = 0.5
_WINDOW_S = 0.05


def cpu_times(path: str = "/proc/stat") -> tuple[float, float] | None:
    """(busy, total) CPU time of the machine, in ticks; None where not readable."""
    try:
        with open(path, encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 5:
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    values = [float(v) for v in fields[1:9]]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)
    return sum(values) - idle, sum(values)


def wait_for_quiet(
    min_s: float,
    max_s: float,
    *,
    read: Callable[[], tuple[float, float] | None] = cpu_times,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    cpus: int | None = None,
) -> float:
    """Sleep ``min_s``, then until a window of ``_WINDOW_S`` has fewer than
    ``QUIET_CPUS`` CPUs busy, or ``max_s`` in all has passed. Returns the seconds
    waited beyond ``min_s``."""
    sleep(min_s)
    start = clock()
    before = read()
    if before is None:
        return 0.0
    n_cpus = cpus or os.cpu_count() or 1
    while clock() - start < max_s - min_s:
        sleep(_WINDOW_S)
        after = read()
        if after is None:
            break
        busy, total = after[0] - before[0], after[1] - before[1]
        if total > 0 and busy / total * n_cpus < QUIET_CPUS:
            break
        before = after
    return clock() - start
