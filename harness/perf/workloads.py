"""The perf workloads: what a benchmark round does to an executor, and what it measures.

Every workload runs against any backend, through ``collective_rpc`` only:

- ``round-trip``: an empty call, one at a time; metric ``latency``.
- ``pipelined``: ``depth`` calls in flight (``non_block=True``), the oldest
  collected before the next is sent; metric ``time per call``.
- ``engine-step``: a simulated engine step with async scheduling. While the
  workers run one forward of the tiny tensor-parallel model (``harness.conformance.models``;
  its all_reduce on gloo, or NCCL on GPUs; sent with ``non_block=True``), the
  caller does a fixed, calibrated amount of work as a scheduler does it
  (Python bookkeeping in short stretches, each followed by a zero-timeout poll
  of its input channel for new requests, which lets go of the GIL as an
  engine loop's socket poll does), then collects the step and sends the next. Metrics:
  ``step`` (wall time), ``caller CPU`` (the caller's process, all its threads,
  per step, over the whole batch: one sample per batch) and ``workers CPU`` (every worker's process together, per step,
  one sample per batch). This is the workload where a driver thread spinning
  on the reply channel hurts: it takes the GIL and a core from the caller's
  work and the workers, while an idle-CPU check (C19) sees nothing.

What a verdict judges by default (``Workload.judged``) is the caller's side:
every metric of the process that calls the executor, since that is what an
engine pays for. ``round-trip`` its latency, ``pipelined`` its time per call,
``engine-step`` the step and the caller's CPU per step, not the workers' CPU.
The caller's CPU is judged beside the step because a thread spinning beside
the calls costs CPU before it costs time: on a quiet 2-core host it left the
step -3 % (no change) and the caller's CPU +52 % (vLLM's executor, 40 rounds).
The workers' CPU is reported, not judged: an executor may rightly move work
between its caller and its workers (a spinning caller thread lowered it by 20 %).

A workload is measured in batches: ``measure(ex, reps)`` returns ``reps``
samples of its per-step metrics. The runner (``harness.perf.runner``) warms up,
interleaves the sides of an A/B run batch by batch, and collects the samples.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import select
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.perf import _probes

__all__ = [
    "WORKLOADS",
    "EngineStep",
    "Pipelined",
    "RoundTrip",
    "Samples",
    "Scheduler",
    "Workload",
    "calibrate_work",
    "judged_metrics",
    "time_calls",
    "workload",
]

#: Metric name -> samples, in seconds.
Samples = dict[str, list[float]]


class Workload(Protocol):
    name: str
    #: Its metrics; the first is the headline.
    metrics: tuple[str, ...]
    #: The metrics a verdict judges unless told one (``--gate``): the caller's
    #: side's; B is slower when any of them is (see the module's docstring).
    judged: tuple[str, ...]
    #: Steps per batch unless told: a batch should last a good many milliseconds,
    #: or it is all the warming up that follows the pause before it.
    default_reps: int

    def calibrate(self) -> None:
        """Once per run, before any executor starts: fix the work a step does
        on this machine (a no-op for workloads with nothing to calibrate)."""

    def prepare(self, ex: Any, world_size: int) -> None:
        """Once per executor, before its warm-up: what the steps need on the workers."""

    def measure(self, ex: Any, world_size: int, reps: int) -> Samples:
        """``reps`` steps; samples of each metric (one per step, or per batch where noted)."""

    def finish(self, ex: Any) -> None:
        """Once per executor, after its last batch."""

    def params(self) -> dict[str, float]:
        """What a baseline stores so that a later run does the same work (may be empty)."""

    def use(self, params: Mapping[str, float]) -> None:
        """Do the work a baseline's ``params`` describe."""


def time_calls(call: Callable[[], Any], reps: int, warmup: int = 0) -> list[float]:
    """Seconds each of ``reps`` calls of ``call`` took, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


@dataclass
class _EmptyCalls:
    """A workload of empty calls: nothing to set up on the workers, no parameters to keep."""

    def calibrate(self) -> None:
        pass

    def prepare(self, ex: Any, world_size: int) -> None:
        ex.collective_rpc(_probes.noop)

    def finish(self, ex: Any) -> None:
        pass

    def params(self) -> dict[str, float]:
        return {}

    def use(self, params: Mapping[str, float]) -> None:
        pass


@dataclass
class RoundTrip(_EmptyCalls):
    name: str = "round-trip"
    metrics: tuple[str, ...] = ("latency",)
    judged: tuple[str, ...] = ("latency",)
    default_reps: int = 500

    def measure(self, ex: Any, world_size: int, reps: int) -> Samples:
        return {"latency": time_calls(lambda: ex.collective_rpc(_probes.noop), reps)}


@dataclass
class Pipelined(_EmptyCalls):
    depth: int = 8
    name: str = "pipelined"
    metrics: tuple[str, ...] = ("time per call",)
    judged: tuple[str, ...] = ("time per call",)
    default_reps: int = 100

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"pipelined: depth must be at least 1 call in flight, got {self.depth}")

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


#: Bookkeeping iterations between two polls of the scheduler's input (about 10 µs).
POLL_EVERY = 200


class Scheduler:
    """The caller's work per step, as an engine's scheduler does it: pure-Python
    bookkeeping (holding the GIL) in stretches of ``POLL_EVERY`` iterations,
    each followed by a zero-timeout poll of an input channel for new requests.

    The polls matter: a real engine loop lets go of the GIL many times a step
    (socket polls, tensor copies), and each time another thread of the process
    that wants the GIL (a driver thread spinning on replies, the seed's
    regression) takes it, and the scheduler waits to get it back. Pure Python
    without a release would only be interrupted every switch interval (5 ms),
    longer than a step, and hide that cost."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()  # nothing ever writes: every poll finds it empty

    def work(self, iterations: int) -> int:
        acc = 0
        done = 0
        while done < iterations:
            n = min(POLL_EVERY, iterations - done)
            for i in range(n):
                acc = (acc * 31 + i) & 0xFFFF
            done += n
            select.select([self._r], [], [], 0)
        return acc

    def close(self) -> None:
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def calibrate_work(seconds: float, timer: Callable[[], float] = time.perf_counter) -> int:
    """Iterations of the scheduler's work (``Scheduler.work``) that take
    ``seconds`` on this machine, undisturbed: the fastest of 9 tries. A median
    would still take the speed of a moment when a just-started worker shared
    the core (measured: steps of 0.6 ms in one A/B run and 1.1 ms in the next,
    for 1 ms asked), and both sides of a run get the calibration it made."""
    if seconds <= 0:
        return 0
    probe = 20_000
    with Scheduler() as scheduler:
        scheduler.work(probe)  # warm
        fastest = math.inf
        for _ in range(9):
            t0 = timer()
            scheduler.work(probe)
            fastest = min(fastest, timer() - t0)
    return max(1, round(seconds / (fastest / probe)))


#: The parameter that marks an engine-step baseline whose caller CPU is per batch.
CALLER_CPU_PER_BATCH = "caller_cpu_per_batch"


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
    judged: tuple[str, ...] = ("step", "caller CPU")
    default_reps: int = 25
    #: Calibrated once (``calibrate``, or the first ``prepare``), and kept: both sides of an A/B run get the same work.
    iterations: int | None = None
    _key: str = field(default="", init=False)
    _scheduler: Scheduler | None = field(default=None, init=False)

    def calibrate(self) -> None:
        if self.iterations is None:
            self.iterations = calibrate_work(self.caller_work_s)

    def prepare(self, ex: Any, world_size: int) -> None:
        hidden = self.dims[1]
        if hidden % world_size:
            raise ValueError(f"engine-step: hidden width {hidden} is not divisible by world size {world_size}")
        self.calibrate()
        self._key = f"engine-step-{id(self)}"
        if self._scheduler is None:
            self._scheduler = Scheduler()
        ex.collective_rpc(_probes.load_model, args=(self._key, self.seed, self.dims, self.device))

    def measure(self, ex: Any, world_size: int, reps: int) -> Samples:
        # As an engine with async scheduling: while step k runs on the workers,
        # the caller schedules step k + 1, then collects step k and sends k + 1.
        # A step's time runs from sending the next one to sending the one after: the caller's
        # work, what is left of the workers' step, and the call's own costs.
        iterations = self.iterations or 0
        assert self._scheduler is not None, "engine-step: measure() before prepare()"
        work = self._scheduler.work
        step_args = (self._key, world_size)
        steps = []
        before = sum(ex.collective_rpc(_probes.cpu_seconds))
        pending = ex.collective_rpc(_probes.model_step, args=step_args, non_block=True)
        c0 = time.process_time()
        for _ in range(reps):
            t0 = time.perf_counter()
            work(iterations)
            pending.result()
            pending = ex.collective_rpc(_probes.model_step, args=step_args, non_block=True)
            steps.append(time.perf_counter() - t0)
        # The caller's CPU over the whole batch, per step (one sample per batch, as
        # the workers'): a thread beside the calls burns in bursts between steps'
        # measurements as well as during them, which per-step medians miss.
        caller = (time.process_time() - c0) / max(reps, 1)
        pending.result()
        workers = (sum(ex.collective_rpc(_probes.cpu_seconds)) - before) / max(reps, 1)
        return {"step": steps, "caller CPU": [caller], "workers CPU": [workers]}

    def finish(self, ex: Any) -> None:
        ex.collective_rpc(_probes.drop_model, args=(self._key,))
        if self._scheduler is not None:
            self._scheduler.close()
            self._scheduler = None

    def params(self) -> dict[str, float]:
        # CALLER_CPU_PER_BATCH marks a baseline whose caller CPU is one sample per
        # batch: one recorded before holds per-step samples, not comparable.
        out = {CALLER_CPU_PER_BATCH: 1.0}
        if self.iterations is not None:
            out["iterations"] = float(self.iterations)
        return out

    def comparable(self, metric: str, params: Mapping[str, float]) -> str | None:
        """Why ``metric`` of a baseline recorded with ``params`` cannot be judged
        against this run's; None where it can."""
        if metric == "caller CPU" and CALLER_CPU_PER_BATCH not in params:
            return "the baseline measured it per step, this run per batch (since the caller's CPU counts bursts)"
        return None

    def use(self, params: Mapping[str, float]) -> None:
        # The baseline's calibration, not this process's: calibrations differ
        # by a few percent from process to process, as much as the change sought.
        if "iterations" in params:
            self.iterations = int(params["iterations"])


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


def judged_metrics(w: Workload, gate: str | None = None) -> tuple[str, ...]:
    """What a verdict on ``w`` judges: ``gate`` alone where one is named (a
    ValueError where ``w`` does not measure it), else ``w.judged``."""
    if gate is None:
        return w.judged
    if gate not in w.metrics:
        raise ValueError(f"gate metric {gate!r}: workload {w.name!r} measures {', '.join(repr(m) for m in w.metrics)}")
    return (gate,)


def merge(into: Samples, more: Samples) -> None:
    for metric, values in more.items():
        into.setdefault(metric, []).extend(values)
