"""How busy the machine is, and the suite's own waits stretched by it.

A loaded machine may make the suite slower, never make a correct backend fail:
the waits that are the suite's own (not SPEC's bounds) scale with the load per
CPU, up to :data:`LOAD_SCALE_MAX` times.
"""

from __future__ import annotations

import os

#: On a loaded machine a wait of the suite's own scales with the load, up to this many times.
LOAD_SCALE_MAX = 6.0


def loads_per_cpu() -> tuple[float, float, float]:
    """The machine's load averages over the last 1, 5 and 15 minutes, per CPU
    (1.0: as many runnable as CPUs); zeros where the system has none."""
    try:
        cpus = os.cpu_count() or 1
        one, five, fifteen = os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)
    return (one / cpus, five / cpus, fifteen / cpus)


def load_per_cpu() -> float:
    """The machine's load average over the last minute, per CPU (1.0: as many runnable as CPUs)."""
    return loads_per_cpu()[0]


def start_up_scale(loads: tuple[float, ...] | None = None) -> float:
    """How many times a start-up bound stretches: the full :data:`LOAD_SCALE_MAX`
    on a machine busier than its CPUs over any of the last 1, 5 or 15 minutes
    (``loads``: those averages per CPU; default: the machine's), else 1.

    A start waits minutes, and the 1-minute average read at its beginning does
    not foretell the load during it: CI's test of a correct ``ray`` start across
    nodes began at 2 runnable per CPU (a 237 s bound) while three other starts
    imported torch beside it, and timed out. Only a start that never completes
    waits the whole bound, so the generous bound costs a broken backend time,
    never a correct one its verdict."""
    if loads is None:
        loads = loads_per_cpu()
    return LOAD_SCALE_MAX if any(load > 1.0 for load in loads) else 1.0


def load_scale(load: float | None = None) -> float:
    """How many times a wait of the suite's own stretches now: the load per CPU,
    between 1 (a machine no busier than its CPUs) and :data:`LOAD_SCALE_MAX`."""
    return min(LOAD_SCALE_MAX, max(1.0, load_per_cpu() if load is None else load))
