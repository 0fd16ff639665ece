"""Latency benchmark: the round trip of an empty ``collective_rpc``, with yardsticks.

Measured in one run, so that ratios hold on a shared, noisy machine:

- ``floor``: a bare shared-memory ping-pong between the caller and the workers
  (spinning on a counter, no pickling): what the hardware allows;
- ``naive``: one ``multiprocessing.Pipe`` per worker and a reader thread in the
  caller that completes a future: the obvious design;
- any backend (``mp`` by default): ``collective_rpc("ping")``... or rather an
  empty module-level callable, which every backend must run.

Also measured: the CPU an idle executor uses (C19): the caller's process, and
its descendants (the workers, wherever a backend starts them under the
caller, as ``mp``, vLLM and a local Ray cluster do), so that a worker which
spins while no call is pending shows.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from multiprocessing import shared_memory
from typing import Any

from harness.backends import load_backend, open_session
from harness.conformance import probes
from harness.executors.mp.shm import buffer_of
from harness.perf._quiet import wait_for_quiet
from harness.perf.runner import parse_side
from harness.perf.workloads import time_calls

__all__ = ["IdleCPU", "LatencyResult", "idle_cpu", "measure_backend", "measure_floor", "measure_naive", "run"]


@dataclass
class LatencyResult:
    name: str
    world_size: int
    median_us: float
    p90_us: float
    samples: int
    #: For a backend: seconds from the factory call to a working executor, and to shut it down.
    startup_s: float | None = None
    shutdown_s: float | None = None
    #: For a backend with a run-wide session (``ray``: a running cluster): start-up inside it.
    session_startup_s: float | None = None

    def line(self) -> str:
        lifecycle = ""
        if self.startup_s is not None and self.shutdown_s is not None:
            lifecycle = f"   start-up {self.startup_s:.2f} s, shutdown {self.shutdown_s:.2f} s"
            if self.session_startup_s is not None:
                lifecycle += f" (start-up with its session running: {self.session_startup_s:.2f} s)"
        return (
            f"{self.name:<10} ws={self.world_size}  median {self.median_us:8.1f} us   "
            f"p90 {self.p90_us:8.1f} us   (n={self.samples}){lifecycle}"
        )


def _summarise(name: str, world_size: int, seconds: Sequence[float]) -> LatencyResult:
    ordered = sorted(seconds)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return LatencyResult(name, world_size, statistics.median(ordered) * 1e6, p90 * 1e6, len(ordered))


# ---- floor: shared-memory ping-pong ---------------------------------------------


def _floor_worker(name: str, rank: int, world_size: int) -> None:
    shm = shared_memory.SharedMemory(name=name)
    view = buffer_of(shm).cast("q")
    seen = 0
    try:
        while True:
            seq = view[0]
            if seq == seen:
                os.sched_yield()
                continue
            if seq < 0:
                return
            seen = seq
            view[1 + rank] = seq
    finally:
        view.release()
        shm.close()


def measure_floor(world_size: int, iters: int, warmup: int) -> LatencyResult:
    shm = shared_memory.SharedMemory(create=True, size=8 * (1 + world_size))
    view = buffer_of(shm).cast("q")
    for i in range(1 + world_size):
        view[i] = 0
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_floor_worker, args=(shm.name, r, world_size)) for r in range(world_size)]
    for p in procs:
        p.start()
    seq = 0

    def ping() -> None:
        nonlocal seq
        seq += 1
        view[0] = seq
        for r in range(world_size):
            while view[1 + r] != seq:
                os.sched_yield()

    try:
        return _summarise("floor", world_size, time_calls(ping, iters, warmup))
    finally:
        view[0] = -1
        for p in procs:
            p.join(10)
            if p.exitcode is None:
                p.kill()
                p.join()
        view.release()
        shm.close()
        shm.unlink()


# ---- naive: a pipe per worker and a reader thread --------------------------------


def _naive_worker(conn: multiprocessing.connection.Connection, rank: int) -> None:
    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send((msg, rank))


def measure_naive(world_size: int, iters: int, warmup: int) -> LatencyResult:
    ctx = multiprocessing.get_context("spawn")
    pipes = [ctx.Pipe() for _ in range(world_size)]
    procs = [ctx.Process(target=_naive_worker, args=(child, r)) for r, (_, child) in enumerate(pipes)]
    for p in procs:
        p.start()
    conns = [parent for parent, _ in pipes]
    pending: dict[int, tuple[concurrent.futures.Future[list[Any]], dict[int, Any]]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            for conn in multiprocessing.connection.wait(conns, timeout=0.1):
                call_id, rank = conn.recv()  # type: ignore[union-attr,call-arg]
                with lock:
                    fut, got = pending[call_id]
                    got[rank] = rank
                    if len(got) == world_size:
                        del pending[call_id]
                        fut.set_result([got[r] for r in range(world_size)])

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    next_id = 0

    def call() -> None:
        nonlocal next_id
        fut: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
        with lock:
            pending[next_id] = (fut, {})
        for c in conns:
            c.send(next_id)
        next_id += 1
        fut.result()

    try:
        return _summarise("naive", world_size, time_calls(call, iters, warmup))
    finally:
        stop.set()
        thread.join()
        for c in conns:
            c.send(None)
        for p in procs:
            p.join(10)
        for c in conns:
            c.close()


# ---- a backend --------------------------------------------------------------------


#: Before the calls are timed: at least this pause, then until the CPUs are quiet, at most this long.
_SETTLE_S = 0.2
_QUIET_MAX_S = 15.0


def measure_backend(backend: str, world_size: int, iters: int, warmup: int) -> LatencyResult:
    """Round trips of an empty call, with the executor's start-up (factory to the
    first completed call; for ``ray`` with no cluster named, starting one) and
    shutdown; for a backend with a session, start-up again with it running."""
    side = parse_side(backend, "--backend")
    loaded = load_backend(side.spec)
    t0 = time.perf_counter()
    ex = loaded.factory(side.config(world_size))
    try:
        ex.collective_rpc(probes.noop)
        startup = time.perf_counter() - t0
        # A cluster the executor just started (ray's) keeps starting processes of
        # its own for seconds: the calls are timed once the CPUs are quiet.
        wait_for_quiet(_SETTLE_S, _QUIET_MAX_S)
        result = _summarise(backend, world_size, time_calls(lambda: ex.collective_rpc(probes.noop), iters, warmup))
    finally:
        t1 = time.perf_counter()
        ex.shutdown()
    result.startup_s, result.shutdown_s = startup, time.perf_counter() - t1
    if loaded.session is not None:
        with open_session(loaded):
            t0 = time.perf_counter()
            with loaded.factory(side.config(world_size)) as ex:
                ex.collective_rpc(probes.noop)
                result.session_startup_s = time.perf_counter() - t0
    return result


@dataclass
class IdleCPU:
    """Percent of one core used while an executor sat idle."""

    caller: float
    #: The processes the executor started, together: its workers by pid where
    #: the executor names them (``worker_pids``), else the caller's descendants
    #: that were not there before it.
    descendants: float
    n_descendants: int
    #: Of those processes' threads, the busiest one's share of the window spent
    #: runnable (on a CPU or waiting for one), and its share on a CPU; None
    #: where ``/proc`` keeps no schedstat. A worker that spins while idle is
    #: runnable throughout, however little of a CPU a loaded machine gives it.
    busiest_runnable: float | None = None
    busiest_on_cpu: float | None = None


def idle_cpu(backend: str, world_size: int, seconds: float) -> IdleCPU:
    """The CPU an executor uses while it sits idle, after one call and a settling pause."""
    import psutil

    side = parse_side(backend, "--backend")
    loaded = load_backend(side.spec)
    me = psutil.Process()
    # A child that was there before (a run-wide Ray cluster, a test runner's
    # helper) is not the executor's: its CPU would be charged to the executor.
    already = {p.pid for p in me.children(recursive=True)}
    with loaded.factory(side.config(world_size)) as ex:
        ex.collective_rpc(probes.noop)
        time.sleep(0.2)  # past any spin after the call (mp's workers: 10 ms)
        procs = _executor_processes(ex, me, already)
        before, runnable0 = _cpu_seconds(procs), _threads_schedstat(procs)
        t0 = time.monotonic()
        c0 = time.process_time()
        time.sleep(seconds)
        used = time.process_time() - c0
        workers, runnable1 = _cpu_seconds(procs) - before, _threads_schedstat(procs)
        elapsed = time.monotonic() - t0
        busiest = max(
            (
                (after[1] - runnable0[t][1], after[0] - runnable0[t][0])
                for t, after in runnable1.items()
                if t in runnable0
            ),
            default=None,
        )
        found = IdleCPU(100.0 * used / elapsed, 100.0 * workers / elapsed, len(procs))
        if busiest is not None:
            found.busiest_runnable, found.busiest_on_cpu = busiest[0] / 1e9 / elapsed, busiest[1] / 1e9 / elapsed
        return found


def _threads_schedstat(procs: list[Any]) -> dict[tuple[int, int], tuple[int, int]]:
    """Per thread of ``procs``: nanoseconds on a CPU, and on a CPU or waiting for
    one (``/proc/<pid>/task/<tid>/schedstat``); empty where there is none."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for proc in procs:
        try:
            tids = os.listdir(f"/proc/{proc.pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{proc.pid}/task/{tid}/schedstat", encoding="ascii") as f:
                    on_cpu, waiting = f.read().split()[:2]
                out[(proc.pid, int(tid))] = (int(on_cpu), int(on_cpu) + int(waiting))
            except (OSError, ValueError):
                continue
    return out


def _executor_processes(ex: Any, me: Any, already: set[int]) -> list[Any]:
    """The processes an executor started: its workers by pid where it names them
    (a Ray actor is a child of Ray's raylet, beside Ray's own servers, which are
    not the executor's), else the caller's descendants that were not there before."""
    import psutil

    pids = getattr(ex, "worker_pids", None)
    if pids and all(isinstance(pid, int) for pid in pids):
        found = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                found.append(psutil.Process(pid))
        if found:
            return found
    return [p for p in me.children(recursive=True) if p.pid not in already]


def _cpu_seconds(procs: list[Any]) -> float:
    import psutil

    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:  # gone meanwhile: its time is not the idle executor's
            continue
        total += times.user + times.system
    return total


def run(
    backends: Sequence[str] = ("mp",),
    world_sizes: Sequence[int] = (1, 2, 4),
    iters: int = 2000,
    warmup: int = 200,
    idle_s: float = 5.0,
    out: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Measure everything in one run; print a table with ratios; return the figures."""
    results: list[LatencyResult] = []
    ratios: list[dict[str, Any]] = []
    for ws in world_sizes:
        floor = measure_floor(ws, iters, warmup)
        naive = measure_naive(ws, iters, warmup)
        results += [floor, naive]
        out(floor.line())
        out(naive.line())
        # The first backend is the yardstick of the others (mp,ray: ray as a multiple of mp).
        first: LatencyResult | None = None
        for b in backends:
            r = measure_backend(b, ws, iters, warmup)
            results.append(r)
            ratio: dict[str, Any] = {
                "backend": b,
                "world_size": ws,
                "speedup_vs_naive": naive.median_us / r.median_us,
                "ratio_to_floor": r.median_us / floor.median_us,
            }
            against = ""
            if first is None:
                first = r
            else:
                ratio["ratio_to_first"] = r.median_us / first.median_us
                against = f", {ratio['ratio_to_first']:.1f}x {first.name}"
            ratios.append(ratio)
            out(
                r.line() + f"   {ratio['speedup_vs_naive']:.2f}x faster than naive, "
                f"{ratio['ratio_to_floor']:.1f}x the floor{against}"
            )
    idle = {}
    for b in backends:
        found = idle_cpu(b, max(world_sizes), idle_s)
        idle[b] = asdict(found)
        out(
            f"idle CPU ({b}, ws={max(world_sizes)}, {idle_s:g} s): caller {found.caller:.2f} % of one core, "
            f"its {found.n_descendants} worker processes {found.descendants:.2f} %"
            + (
                f" (their busiest thread runnable {100 * found.busiest_runnable:.1f} % of the time)"
                if found.busiest_runnable is not None
                else ""
            )
        )
    return {
        "results": [asdict(r) for r in results],
        "ratios": ratios,
        "idle_cpu_percent": idle,
        "iters": iters,
        "cpu_count": os.cpu_count(),
    }
