"""The cost curves: what they measure, and how they read a cost that grows faster than its work."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness.perf import _probes
from harness.perf.curves import (
    PAYLOAD_SIZES,
    KiB,
    MiB,
    PayloadPoint,
    WorldSizePoint,
    default_world_sizes,
    format_size,
    growth_notes,
    memcpy_floor,
    payload_curve,
    reps_for,
    world_size_curve,
)


class _Executor:
    """Runs calls in-process, as rank 0 and 1, so the curves can be read without workers."""

    def __init__(self, world_size: int = 2, short_by: int = 0) -> None:
        self.world_size = world_size
        self.short_by = short_by
        self.calls: list[Any] = []

    def collective_rpc(self, method: Any, args: tuple[Any, ...] = ()) -> list[Any]:
        self.calls.append(method)
        out = [method(self, *args) for _ in range(self.world_size)]
        if method is _probes.blob and self.short_by:
            out[-1] -= self.short_by
        return out


def test_payload_sizes_run_from_one_kib_to_64_mib() -> None:
    assert PAYLOAD_SIZES[0] == KiB and PAYLOAD_SIZES[-1] == 64 * MiB
    assert all(b == 4 * a for a, b in itertools.pairwise(PAYLOAD_SIZES))
    assert [format_size(s) for s in (512, KiB, 256 * KiB, 64 * MiB)] == ["512 B", "1 KiB", "256 KiB", "64 MiB"]


def test_big_payloads_get_few_repetitions_and_small_ones_many() -> None:
    assert reps_for(KiB) == 200 and reps_for(64 * MiB) == 8 and reps_for(10**12) == 5


def test_the_payload_curve_sends_every_size_and_measures_the_copy_beside_it() -> None:
    ex = _Executor()
    points = payload_curve(ex, [KiB, 64 * KiB], most_reps=5)
    assert [p.size for p in points] == [KiB, 64 * KiB]
    assert all(p.call_s > 0 and p.floor_s > 0 and p.reps == 5 for p in points)
    assert points[1].throughput == pytest.approx(64 * KiB / points[1].call_s)
    assert len(ex.calls) == 2 * (5 + 2)  # each size: 2 warm-up calls and 5 timed


def test_a_rank_that_reports_another_size_stops_the_curve_with_both_named() -> None:
    with pytest.raises(ValueError, match=r"1 KiB sent, the ranks report \[1024, 1023\]"):
        payload_curve(_Executor(short_by=1), [KiB], most_reps=5)


def test_a_payload_size_below_one_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 byte, got 0"):
        payload_curve(_Executor(), [0])


def test_the_copy_floor_of_more_bytes_takes_longer() -> None:
    small, big = memcpy_floor(bytes(KiB), 20), memcpy_floor(bytes(16 * MiB), 5)
    assert 0 < small < big


def test_the_world_size_curve_starts_an_executor_per_size() -> None:
    opened: list[int] = []

    @contextlib.contextmanager
    def open_executor(ws: int) -> Iterator[_Executor]:
        opened.append(ws)
        yield _Executor(ws)

    points = world_size_curve(open_executor, [1, 2, 4], reps=3)
    assert opened == [1, 2, 4] and [p.world_size for p in points] == [1, 2, 4]
    assert "x world size 1" in points[2].line(points[0])


def test_world_sizes_are_those_the_cores_allow_and_always_one_and_two() -> None:
    assert default_world_sizes(1) == [1, 2]
    assert default_world_sizes(2) == [1, 2]
    assert default_world_sizes(6) == [1, 2, 4]
    assert default_world_sizes(64) == [1, 2, 4, 8]


def _curve(call_s: Callable[[int], float], copy_s: Callable[[int], float]) -> list[PayloadPoint]:
    return [PayloadPoint(s, call_s(s), copy_s(s), 5) for s in PAYLOAD_SIZES]


def test_a_cost_linear_in_the_bytes_is_not_noted() -> None:
    assert growth_notes(_curve(lambda s: 20e-6 + 1e-9 * s, lambda s: 1e-10 * s)) == []


def test_a_cost_that_slows_only_as_the_copy_slows_is_not_noted() -> None:
    # Past 4 MiB every byte costs the copy 3x as much (the caches): the call too.
    def cached(s: int) -> float:
        return 1e-10 * s * (3 if s > 4 * MiB else 1)

    assert growth_notes(_curve(lambda s: 10 * cached(s), cached)) == []


def test_a_cost_that_grows_with_the_square_of_the_bytes_is_noted_at_the_size_it_shows() -> None:
    notes = growth_notes(_curve(lambda s: 20e-6 + 1e-9 * s * (s / MiB), lambda s: 1e-10 * s))
    # Past 256 KiB each size is 4x the last, so a quadratic cost is noted at every one.
    assert [n.split(":")[0] for n in notes] == ["payload 1 MiB", "payload 4 MiB", "payload 16 MiB", "payload 64 MiB"]
    assert notes[-1] == (
        "payload 64 MiB: 640.0x a plain copy of its bytes, against 3.3x at 256 KiB: cost grows faster than the bytes"
    )


def test_a_call_that_costs_more_than_the_added_ranks_is_noted() -> None:
    linear = [WorldSizePoint(ws, 10e-6 * ws, 100) for ws in (1, 2, 4)]
    assert growth_notes(world=linear) == []
    quadratic = [WorldSizePoint(ws, 10e-6 * ws * ws, 100) for ws in (1, 2, 4, 8)]
    notes = growth_notes(world=quadratic)
    assert [n.split(":")[0] for n in notes] == ["world size 2", "world size 4", "world size 8"]
    assert "16.00x the call at world size 1, more than the 4x more ranks" in notes[1]
