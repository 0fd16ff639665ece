"""How a backend's cost grows with the work: round trip against payload size and
against world size, each next to a yardstick measured in the same run.

- ``payload_curve``: a call whose request carries ``size`` bytes to every rank
  (1 KiB to 64 MiB by default), timed round trip; next to it, the time of one
  plain copy of the same bytes in the caller (``memcpy_floor``), the least any
  design can pay to move them. Throughput is bytes per second of round trip.
- ``world_size_curve``: the empty call's round trip at each world size (1, 2,
  4, 8 where the machine has the cores), each executor started afresh.

``growth_notes`` reads a curve for cost that grows faster than the work: past
``LINEAR_FROM`` bytes, a call's time as a multiple of the plain copy should
not rise (a copy too many shows as a constant factor, a quadratic cost as a
rising one; against the copy, because caches make every byte dearer past
their size for both), and from world
size 1 to N a call should not cost more than N times as much (a broadcast that
pays per rank is linear; more than that is a rank paying for the others).
"""

from __future__ import annotations

import itertools
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.perf import _probes
from harness.perf.workloads import time_calls

__all__ = [
    "PAYLOAD_SIZES",
    "PayloadPoint",
    "WorldSizePoint",
    "default_world_sizes",
    "growth_notes",
    "memcpy_floor",
    "payload_curve",
    "world_size_curve",
]

KiB = 1024
MiB = 1024 * KiB
#: 1 KiB to 64 MiB, by factors of 4.
PAYLOAD_SIZES: tuple[int, ...] = tuple(KiB * 4**i for i in range(10) if KiB * 4**i <= 64 * MiB)
#: Below this the fixed cost of a call dominates, and time per byte falls as payloads grow.
LINEAR_FROM = 256 * KiB
#: How far the cost may rise past ``LINEAR_FROM`` (as a multiple of the copy), or past linear in the ranks, unnoted.
GROWTH_TOLERANCE = 1.5
#: Bytes a curve's point moves in all, across its repetitions: a few per point at 64 MiB, hundreds at 1 KiB.
_BYTES_PER_POINT = 512 * MiB


@dataclass(frozen=True)
class PayloadPoint:
    size: int
    #: Median round trip of a call carrying ``size`` bytes, seconds.
    call_s: float
    #: Median time of one plain copy of ``size`` bytes in the caller, seconds.
    floor_s: float
    reps: int

    @property
    def throughput(self) -> float:
        return self.size / self.call_s

    @property
    def floor_throughput(self) -> float:
        return self.size / self.floor_s

    @property
    def times_floor(self) -> float:
        return self.call_s / self.floor_s

    def line(self) -> str:
        return (
            f"{format_size(self.size):>8}  call {self.call_s * 1e6:10.1f} us  {self.throughput / MiB:9.1f} MiB/s   "
            f"copy {self.floor_s * 1e6:9.1f} us  {self.floor_throughput / MiB:9.1f} MiB/s   "
            f"{self.times_floor:7.1f}x the copy  (n={self.reps})"
        )


@dataclass(frozen=True)
class WorldSizePoint:
    world_size: int
    #: Median round trip of an empty call, seconds.
    call_s: float
    reps: int

    def line(self, base: WorldSizePoint | None = None) -> str:
        rel = f"   {self.call_s / base.call_s:5.2f}x world size {base.world_size}" if base else ""
        return f"ws={self.world_size:<3} call {self.call_s * 1e6:10.1f} us  (n={self.reps}){rel}"


def format_size(size: int) -> str:
    if size >= MiB and size % MiB == 0:
        return f"{size // MiB} MiB"
    if size >= KiB and size % KiB == 0:
        return f"{size // KiB} KiB"
    return f"{size} B"


def reps_for(size: int, most: int = 200, least: int = 5) -> int:
    """Repetitions for a payload: many for small ones, a few for 64 MiB."""
    return max(least, min(most, _BYTES_PER_POINT // max(size, 1)))


def _median_time(call: Callable[[], Any], reps: int, warmup: int = 2) -> float:
    return statistics.median(time_calls(call, reps, warmup))


def memcpy_floor(data: bytes, reps: int) -> float:
    """Median seconds of one copy of ``data`` into a buffer of its size."""
    dst = bytearray(len(data))
    view = memoryview(dst)

    def copy() -> None:
        view[:] = data

    try:
        return _median_time(copy, reps)
    finally:
        view.release()


def payload_curve(
    ex: Any,
    sizes: Sequence[int] = PAYLOAD_SIZES,
    *,
    most_reps: int = 200,
    progress: Callable[[str], None] | None = None,
) -> list[PayloadPoint]:
    """Round trip of ``collective_rpc`` carrying each payload to every rank, and
    the copy floor of the same bytes, measured one size after the other."""
    points = []
    for size in sizes:
        if size < 1:
            raise ValueError(f"payload curve: a payload size must be at least 1 byte, got {size}")
        data = os.urandom(size)
        reps = reps_for(size, most=most_reps)

        def call(data: bytes = data) -> None:
            got = list(ex.collective_rpc(_probes.blob, args=(data,)))
            if not got or any(n != len(data) for n in got):
                raise ValueError(f"payload curve: {format_size(len(data))} sent, the ranks report {got!r}")

        points.append(PayloadPoint(size, _median_time(call, reps), memcpy_floor(data, reps), reps))
        if progress is not None:
            progress(points[-1].line())
    return points


def default_world_sizes(cpu_count: int | None = None) -> list[int]:
    """1, 2, 4, 8: those the machine has the cores for, and always 1 and 2."""
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    return [ws for ws in (1, 2, 4, 8) if ws <= max(2, cores)]


def world_size_curve(
    open_executor: Callable[[int], Any],
    world_sizes: Sequence[int],
    *,
    reps: int = 500,
    progress: Callable[[str], None] | None = None,
) -> list[WorldSizePoint]:
    """The empty call's round trip at each world size. ``open_executor(ws)`` is
    a context manager giving a started executor (``runner.open_side``)."""
    points = []
    for ws in world_sizes:
        with open_executor(ws) as ex:

            def call(ex: Any = ex) -> None:
                ex.collective_rpc(_probes.noop)

            points.append(WorldSizePoint(ws, _median_time(call, reps, 20), reps))
        if progress is not None:
            progress(points[-1].line(points[0]))
    return points


def growth_notes(payload: Sequence[PayloadPoint] = (), world: Sequence[WorldSizePoint] = ()) -> list[str]:
    """Where a curve's cost grows faster than its work, one line each; empty where it does not."""
    notes = []
    # Against the copy of the same bytes, measured beside it: caches make every
    # byte dearer past their size, for the copy as much as for the call.
    linear = [p for p in sorted(payload, key=lambda p: p.size) if p.size >= LINEAR_FROM]
    for earlier, later in itertools.pairwise(linear):
        best = min((p for p in linear if p.size <= earlier.size), key=lambda p: p.times_floor)
        if later.times_floor > GROWTH_TOLERANCE * best.times_floor:
            notes.append(
                f"payload {format_size(later.size)}: {later.times_floor:.1f}x a plain copy of its bytes, against "
                f"{best.times_floor:.1f}x at {format_size(best.size)}: cost grows faster than the bytes"
            )
    ordered = sorted(world, key=lambda p: p.world_size)
    if ordered:
        base = ordered[0]
        for p in ordered[1:]:
            allowed = p.world_size / base.world_size
            if p.call_s > allowed * GROWTH_TOLERANCE * base.call_s:
                notes.append(
                    f"world size {p.world_size}: {p.call_s / base.call_s:.2f}x the call at world size "
                    f"{base.world_size}, more than the {allowed:g}x more ranks: cost grows faster than the ranks"
                )
    return notes
