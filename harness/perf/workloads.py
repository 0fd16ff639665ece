"""The perf workloads: what a benchmark round does to an executor, and what it measures.

Every workload runs against any backend, through ``collective_rpc`` only:

- ``round-trip``: an empty call, one at a time; metric ``latency``.
- ``pipelined``: ``depth`` calls in flight (``non_block=True``), the oldest
  collected before the next is sent; metric ``time per call``.
- ``engine-step``: a simulated engine step with async scheduling. While the
  workers run one forward of the tiny tensor-parallel model (``harness.models``;
  its all_reduce on gloo, or NCCL on GPUs; sent with ``non_block=True``), the
  caller does a fixed, calibrated amount of pure-Python work (a scheduler
  serialising the next batch), then collects the step and sends the next. Metrics:
  ``step`` (wall time), ``caller CPU`` (the caller's process, all its threads,
  per step) and ``workers CPU`` (every worker's process together, per step,
  one sample per batch). This is the workload where a driver thread spinning
  on the reply channel hurts: it takes the GIL and a core from the caller's
  work and the workers, while an idle-CPU check (C19) sees nothing.

A workload is measured in batches: ``measure(ex, reps)`` returns ``reps``
samples of its per-step metrics. The runner (``harness.perf.runner``) warms up,
interleaves the sides of an A/B run batch by batch, and collects the samples.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.perf import _probes

__all__ = ["WORKLOADS", "EngineStep", "Pipelined", "RoundTrip", "Samples", "Workload", "calibrate_work", "workload"]

#: Metric name -> samples, in seconds.
Samples = dict[str, list[float]]


class Workload(Protocol):
    name: str
    #: Its metrics; the first is the headline, the one an A/B gate judges by default.
    metrics: tuple[str, ...]

    def prepare(self, ex: Any, world_size: int) -> None:
        """Once per executor, before its warm-up: what the steps need on the workers."""

    def measure(self, ex: Any, world_size: int, reps: int) -> Samples:
        """``reps`` steps; samples of each metric (one per step, or per batch where noted)."""

    def finish(self, ex: Any) -> None:
        """Once per executor, after its last batch."""


@dataclass
class RoundTrip:
    name: str = "round-trip"
    metrics: tuple[str, ...] = ("latency",)

    def prepare(self, ex: Any, world_size: int) -> None:
        ex.collective_rpc(_probes.noop)

    def measure(self, ex: Any, world_size: int, reps: int) -> Samples:
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            ex.collective_rpc(_probes.noop)
            out.append(time.perf_counter() - t0)
        return {"latency": out}

    def finish(self, ex: Any) -> None:
        pass


@dataclass
class Pipelined:
    depth: int = 8
    name: str = "pipelined"
    metrics: tuple[str, ...] = ("time per call",)

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"pipelined: depth must be at least 1 call in flight, got {self.depth}")

    def prepare(self, ex: Any, world_size: int) -> None:
        ex.collective_rpc(_probes.noop)

    def measure(self, ex: Any, world_size: int, reps: int) -> Samples:
        # One sample per window of `depth` calls: the time to send and collect
        # them with the window kept full, divided by `depth`.
        out = []
        in_flight: collections.deque[Any] = collections.deque()
        for _ in range(self.depth):
            in_flight.append(ex.collective_rpc(_probes.noop, non_block=True))
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(self.depth):
                in_flight.popleft().result()
                in_flight.append(ex.collective_rpc(_probes.noop, non_block=True))
            out.append((time.perf_counter() - t0) / self.depth)
        while in_flight:
            in_flight.popleft().result()
        return {"time per call": out}

    def finish(self, ex: Any) -> None:
        pass


def _work(iterations: int) -> int:
    """Pure-Python work holding the GIL, as a scheduler's bookkeeping does."""
    acc = 0
    for i in range(iterations):
        acc = (acc * 31 + i) & 0xFFFF
    return acc


def calibrate_work(seconds: float, timer: Callable[[], float] = time.perf_counter) -> int:
    """Iterations of the caller's work that take ``seconds`` on this machine
    now (the median of a few tries, so a preemption does not skew it)."""
    if seconds <= 0:
        return 0
    probe = 20_000
    tries = []
    for _ in range(5):
        t0 = timer()
        _work(probe)
        tries.append(timer() - t0)
    per_iteration = sorted(tries)[len(tries) // 2] / probe
    return max(1, round(seconds / per_iteration))


@dataclass
class EngineStep:
    #: The caller's work per step, in seconds on this machine (calibrated once, at prepare).
    caller_work_s: float = 0.001
    #: The tiny model: input width, hidden width (split over the ranks), output width.
    dims: tuple[int, int, int] = (256, 1024, 256)
    device: str = "cpu"
    seed: int = 0
    name: str = "engine-step"
    metrics: tuple[str, ...] = ("step", "caller CPU", "workers CPU")
    #: Calibrated once per process, and kept: both sides of an A/B run get the same work.
    iterations: int | None = None
    _key: str = field(default="", init=False)

    def prepare(self, ex: Any, world_size: int) -> None:
        hidden = self.dims[1]
        if hidden % world_size:
            raise ValueError(f"engine-step: hidden width {hidden} is not divisible by world size {world_size}")
        if self.iterations is None:
            self.iterations = calibrate_work(self.caller_work_s)
        self._key = f"engine-step-{id(self)}"
        ex.collective_rpc(_probes.load_model, args=(self._key, self.seed, self.dims, self.device))

    def measure(self, ex: Any, world_size: int, reps: int) -> Samples:
        # As an engine with async scheduling: while step k runs on the workers,
        # the caller schedules step k + 1, then collects step k and sends k + 1.
        # A step's time runs from sending the next one to sending the one after: the caller's
        # work, what is left of the workers' step, and the call's own costs.
        iterations = self.iterations or 0
        step_args = (self._key, world_size)
        steps, caller = [], []
        before = sum(ex.collective_rpc(_probes.cpu_seconds))
        pending = ex.collective_rpc(_probes.model_step, args=step_args, non_block=True)
        for _ in range(reps):
            t0, c0 = time.perf_counter(), time.process_time()
            _work(iterations)
            pending.result()
            pending = ex.collective_rpc(_probes.model_step, args=step_args, non_block=True)
            steps.append(time.perf_counter() - t0)
            caller.append(time.process_time() - c0)
        pending.result()
        workers = (sum(ex.collective_rpc(_probes.cpu_seconds)) - before) / max(reps, 1)
        return {"step": steps, "caller CPU": caller, "workers CPU": [workers]}

    def finish(self, ex: Any) -> None:
        ex.collective_rpc(_probes.drop_model, args=(self._key,))


WORKLOADS: dict[str, Callable[[], Workload]] = {
    "round-trip": RoundTrip,
    "pipelined": Pipelined,
    "engine-step": EngineStep,
}


def workload(name: str, where: str = "the command line") -> Workload:
    """A fresh workload by name; a ValueError names the value, where it came from, and the choices."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r} from {where}: expected one of {', '.join(WORKLOADS)}")
    return WORKLOADS[name]()


def merge(into: Samples, more: Samples) -> None:
    for metric, values in more.items():
        into.setdefault(metric, []).extend(values)
