"""What a process holds as calls go by: its own memory, descriptors and threads,
sampled, and their growth per 1,000 calls (C10: an executor keeps nothing of a
completed call).

    samples (calls, {(process, quantity): value}) ──► after the warm-up, the
    least-squares slope per 1,000 calls ──► Growth, over its bound or not

The chaos run's soak (``harness.chaos.soak``) and the suite's C10 check use it.
"""

from __future__ import annotations

import dataclasses

import psutil

__all__ = [
    "BOUNDS",
    "JUDGED_FROM_CALLS",
    "MAX_CALLS",
    "SAMPLE_EVERY",
    "WARM_UP",
    "WINDOW",
    "Growth",
    "enough_to_judge",
    "growth_of",
    "measure",
    "slope",
]

#: Calls between two samples.
SAMPLE_EVERY = 250
#: The share of the samples taken as warm-up, not judged: a runtime's caches may
#: fill for thousands of calls (Ray's driver grew by 65 MiB over its first 7,500
#: calls, then not at all over 20,000 more; measured).
WARM_UP = 0.5
#: The calls whose growth decides, once the warm-up is behind: where a window
#: is over its bound, the suite's check goes on for another (up to MAX_CALLS):
#: growth that stops was a warm-up, growth that goes on is kept per call.
WINDOW = 5_000
MAX_CALLS = 40_000
#: Fewer calls than this after the warm-up, and growth is printed but not judged.
JUDGED_FROM_CALLS = 2000
#: Growth per 1,000 calls beyond which a quantity is a finding (after the warm-up).
#: A worker that kept every reply of a chaos soak (17 KiB a call on average) grew
#: by 17 MiB per 1,000 calls; mp's processes moved by under 0.5 (measured).
BOUNDS = {"memory": 4.0 * (1 << 20), "fds": 0.5, "threads": 0.5}
UNITS = {"memory": "MiB", "fds": "descriptors", "threads": "threads"}


@dataclasses.dataclass
class Growth:
    """One quantity of one process over the soak."""

    process: str
    quantity: str
    first: float
    last: float
    per_1000: float
    bound: float

    @property
    def over(self) -> bool:
        return self.per_1000 > self.bound

    def describe(self) -> str:
        scale = (1 << 20) if self.quantity == "memory" else 1
        unit = UNITS[self.quantity]
        return (
            f"{self.process} {self.quantity}: {self.first / scale:.1f} -> {self.last / scale:.1f} {unit}, "
            f"{self.per_1000 / scale:+.2f} {unit} per 1,000 calls (bound {self.bound / scale:g})"
        )


def enough_to_judge(calls: int) -> bool:
    """Whether ``calls`` leave :data:`JUDGED_FROM_CALLS` after the warm-up."""
    return calls - int(calls * WARM_UP) >= JUDGED_FROM_CALLS


def measure(processes: dict[str, int]) -> dict[tuple[str, str], float]:
    """Each process's own memory (USS), descriptors and threads now (a process gone reads nothing)."""
    out: dict[tuple[str, str], float] = {}
    for label, pid in processes.items():
        try:
            p = psutil.Process(pid)
            with p.oneshot():
                out[(label, "memory")] = float(_private_memory(p))
                out[(label, "fds")] = float(p.num_fds())
                out[(label, "threads")] = float(p.num_threads())
        except (psutil.Error, OSError):
            continue
    return out


def _private_memory(process: psutil.Process) -> int:
    """Memory the process holds alone (USS): what it allocates, counted.

    Not its RSS: a forked worker's RSS already counts the caller's pages it
    shares, and new objects that land on them (copied on write) leave RSS as it
    was; a worker that kept every 17 KiB result grew by 0.00 MiB of RSS per
    1,000 calls that way, by 17 MiB where spawned (measured)."""
    try:
        return int(process.memory_full_info().uss)
    except (psutil.AccessDenied, AttributeError):
        return int(process.memory_info().rss)


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of value against calls, per 1,000 calls."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return 1000.0 * sum((x - mx) * (y - my) for x, y in points) / sxx


def growth_of(samples: list[tuple[int, dict[tuple[str, str], float]]], since: int | None = None) -> list[Growth]:
    """Each (process, quantity)'s growth per 1,000 calls over the samples from call
    ``since`` on (default: after the warm-up, :data:`WARM_UP` of the calls)."""
    if since is None:
        since = int(samples[-1][0] * WARM_UP) if samples else 0
    kept = [(calls, values) for calls, values in samples if calls >= since]
    keys = sorted({key for _, values in kept for key in values})
    out = []
    for process, quantity in keys:
        points = [(calls, values[(process, quantity)]) for calls, values in kept if (process, quantity) in values]
        if len(points) < 2:
            continue
        out.append(Growth(process, quantity, points[0][1], points[-1][1], slope(points), BOUNDS[quantity]))
    return out
