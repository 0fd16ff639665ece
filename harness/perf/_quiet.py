"""Waiting for a quiet machine before a batch is measured.

Some executors keep their workers spinning long after their last call (vLLM's
workers poll their queue for 1 s). A batch measured right after a warm-up, or
after another executor's batch where several are alive (``run_rounds`` with
more than one side), would share the cores with those spinning workers.
Before each batch the runner therefore waits until the machine's CPUs have
gone quiet, for a bounded time: on a machine that never goes quiet (another
job), it measures anyway.

The caller's own CPU does not count: it sleeps while it waits, so what its
process burns meanwhile is its own threads (a thread polling a reply queue
beside the calls), which run during the batch whatever the wait, and waiting
on them would only cost the bound on every batch of such a side.

Busy time is read from ``/proc/stat`` (Linux); elsewhere only the fixed pause
is taken.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

__all__ = ["QUIET_CPUS", "cpu_times", "own_cpu_ticks", "wait_for_quiet"]

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


def own_cpu_ticks() -> float:
    """This process's CPU time, all its threads, in ``/proc/stat``'s ticks."""
    return time.process_time() * _TICKS_PER_S


_TICKS_PER_S = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def wait_for_quiet(
    min_s: float,
    max_s: float,
    *,
    read: Callable[[], tuple[float, float] | None] = cpu_times,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    cpus: int | None = None,
    own: Callable[[], float] = own_cpu_ticks,
) -> float:
    """Sleep ``min_s``, then until a window of ``_WINDOW_S`` has fewer than
    ``QUIET_CPUS`` CPUs busy with other processes than this one (``own``: this
    process's ticks), or ``max_s`` in all has passed. Returns the seconds
    waited beyond ``min_s``."""
    sleep(min_s)
    start = clock()
    before, own_before = read(), own()
    if before is None:
        return 0.0
    n_cpus = cpus or os.cpu_count() or 1
    while clock() - start < max_s - min_s:
        sleep(_WINDOW_S)
        after, own_after = read(), own()
        if after is None:
            break
        busy = after[0] - before[0] - (own_after - own_before)
        total = after[1] - before[1]
        if total > 0 and busy / total * n_cpus < QUIET_CPUS:
            break
        before, own_before = after, own_after
    return clock() - start
