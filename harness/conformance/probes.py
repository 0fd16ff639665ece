"""Module-level functions the suite runs on workers (picklable by reference).

Each takes the worker first, as SPEC.md's callable methods do, and relies only
on the worker contract: ``worker.rank`` and the default process group.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from harness.conformance._markers import leave
from harness.system.pids import pid_namespace


def rank(worker: Any) -> int:
    return int(worker.rank)


def pid(worker: Any) -> int:
    return os.getpid()


def process(worker: Any) -> tuple[int, int]:
    """The rank's pid and its PID namespace (an inode): the caller finds the
    process by both (a rank on a simulated node has a pid of its node's)."""
    return os.getpid(), pid_namespace()


def hostname(worker: Any) -> str:
    """The name of the machine the rank runs on (each node has its own)."""
    import socket

    return socket.gethostname()


def echo(worker: Any, *args: Any, **kwargs: Any) -> tuple[int, tuple[Any, ...], dict[str, Any]]:
    """Returns what arrived, tagged with the rank."""
    return int(worker.rank), args, kwargs


def noop(worker: Any) -> None:
    return None


def sleep(worker: Any, seconds: float) -> int:
    time.sleep(seconds)
    return int(worker.rank)


def sleep_marked(worker: Any, marker_dir: str, seconds: float) -> int:
    """Leave the file ``rank-<rank>`` in ``marker_dir`` once the sleep starts, then
    sleep: the caller learns that the call runs in every worker, not just that it was sent."""
    from pathlib import Path

    leave(Path(marker_dir, f"rank-{int(worker.rank)}"))
    time.sleep(seconds)
    return int(worker.rank)


def zeros(worker: Any, nbytes: int) -> bytes:
    """A result of ``nbytes`` bytes, made at once (a large reply, cheap to make)."""
    return bytes(nbytes)


def sleep_on_rank(worker: Any, rank: int, seconds: float) -> int:
    """Only ``rank`` sleeps: a slow worker among fast ones."""
    if worker.rank == rank:
        time.sleep(seconds)
    return int(worker.rank)


def finish_in_reverse(worker: Any, step_s: float = 0.2) -> int:
    """Higher ranks finish first: rank r sleeps (world_size - 1 - r) * step_s."""
    import torch.distributed as dist

    time.sleep((dist.get_world_size() - 1 - worker.rank) * step_s)
    return int(worker.rank)


def finish_in_reverse_with(worker: Any, step_s: float, values: list[Any]) -> Any:
    """``finish_in_reverse``, answering ``values[rank]``: values chosen so that no
    order but the ranks' (not arrival, not sorted) lists them as asked."""
    finish_in_reverse(worker, step_s)
    return values[int(worker.rank)]


def raise_on_rank(worker: Any, rank: int, message: str) -> int:
    if worker.rank == rank:
        raise ValueError(message)
    return int(worker.rank)


def unpicklable_result(worker: Any) -> Any:
    import threading

    return threading.Lock()


def payload(worker: Any, data: bytes) -> tuple[int, int, bytes]:
    """Echoes a large payload back, with its length."""
    return int(worker.rank), len(data), data


def payload_digest(worker: Any, data: bytes) -> tuple[int, int, str]:
    """(rank, length, sha256 hex) of a large argument as it arrived."""
    import hashlib

    return int(worker.rank), len(data), hashlib.sha256(data).hexdigest()


def make_payload(worker: Any, nbytes: int, seed: int) -> bytes:
    import random

    return random.Random(seed + worker.rank).randbytes(nbytes)


def dist_info(worker: Any) -> tuple[int, int, int, int]:
    """(worker.rank, process-group rank, world size, pid)."""
    import torch.distributed as dist

    return int(worker.rank), dist.get_rank(), dist.get_world_size(), os.getpid()


def collectives(worker: Any, device: str = "cpu") -> dict[str, Any]:
    """all_reduce, all_gather, broadcast and barrier on the default group."""
    import torch
    import torch.distributed as dist

    r, ws = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    t = torch.full((4,), float(r + 1), device=dev)
    dist.all_reduce(t)
    gathered = [torch.zeros(2, device=dev) for _ in range(ws)]
    dist.all_gather(gathered, torch.tensor([float(r), float(r * r)], device=dev))
    b = torch.arange(3, dtype=torch.float32, device=dev) * (r + 1)
    dist.broadcast(b, src=0)
    dist.barrier()
    return {
        "all_reduce": t.cpu().tolist(),
        "all_gather": [g.cpu().tolist() for g in gathered],
        "broadcast": b.cpu().tolist(),
    }


def point_to_point(worker: Any, device: str = "cpu") -> list[Any]:
    """Sends [rank, destination] to every other rank and receives from each: what
    came from each rank, in rank order (None for this rank itself). The sends
    are posted first, so that no pair waits on another."""
    import torch
    import torch.distributed as dist

    r, ws = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    sent = [torch.tensor([float(r), float(dst)], device=dev) for dst in range(ws)]
    works = [dist.isend(sent[dst], dst) for dst in range(ws) if dst != r]
    got: list[Any] = [None] * ws
    for src in range(ws):
        if src != r:
            t = torch.zeros(2, device=dev)
            dist.recv(t, src)
            got[src] = t.cpu().tolist()
    for work in works:
        if work is not None:  # None only where this rank is not in the group
            work.wait()
    return got


def listening_sockets(worker: Any) -> list[tuple[str, int]]:
    """(address, port) of every socket this process listens on (TCP) or has bound (UDP)."""
    from harness.system.leaks import listening_sockets as _ls

    return _ls(os.getpid())


def echo_value(worker: Any, value: Any) -> Any:
    return value


def sleep_then_echo(worker: Any, seconds: float, value: Any) -> tuple[int, Any]:
    time.sleep(seconds)
    return int(worker.rank), value


#: Per-process state of the probes that keep some. Module-level, not set on the
#: worker object: SPEC.md promises a worker only ``rank``, and a worker may
#: refuse new attributes. Keyed by rank as well, for backends whose ranks share
#: a process (their calls run in the caller's).
_COUNTS: dict[tuple[str, int], int] = {}


def count_calls(worker: Any, key: str) -> int:
    """Counts the calls this rank saw under ``key`` (kept in this module, not on the worker)."""
    k = (key, int(worker.rank))
    _COUNTS[k] = _COUNTS.get(k, 0) + 1
    return _COUNTS[k]


def calls_counted(worker: Any, key: str) -> int:
    """How many ``count_calls(key)`` this rank has run, without counting this one."""
    return _COUNTS.get((key, int(worker.rank)), 0)


#: The string method ``install_echo_method`` adds to a worker.
ECHO_METHOD = "harness_echo"


def _echo_method(worker: Any, *args: Any, **kwargs: Any) -> tuple[int, tuple[Any, ...], dict[str, Any]]:
    return echo(worker, *args, **kwargs)


def install_echo_method(worker: Any) -> bool:
    """Gives the worker's class a method ``harness_echo``, so string methods can be
    tested on any worker. On the class, not the object: SPEC.md promises the
    object only ``rank``, and it may refuse new attributes (``__slots__``).
    Returns False where even the class refuses (an extension type)."""
    cls = type(worker)
    if getattr(cls, ECHO_METHOD, None) is _echo_method:
        return True
    try:
        setattr(cls, ECHO_METHOD, _echo_method)
    except (TypeError, AttributeError):
        return False
    return True


def sleep_on_rank_then(worker: Any, rank: int, seconds: float, value: Any) -> Any:
    if worker.rank == rank:
        time.sleep(seconds)
    return value


def _one_thread() -> None:
    """Runs this rank's torch operations on one thread. The ranks share the
    machine's cores, and torch gives every rank a pool of a thread per core:
    on 2 cores, 4 ranks' steps in flight took 16 s that way against 2.2 s with
    one thread each (the models are tiny; the check is the executor, not matmul
    speed)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _decoder_on(seed: int, dtype: str, device: str, world_size: int) -> tuple[dict[str, Any], Any, list[int]]:
    """The decoder's dense weights on this rank's device, its shape and prompt."""
    from harness.conformance import models

    _one_thread()
    shape = models.DecoderShape.for_world_size(world_size)
    w = _on_device(models.decoder_weights(seed, shape, dtype), device)
    return w, shape, models.decoder_prompt(seed, shape)


def _on_device(w: dict[str, Any], device: str) -> dict[str, Any]:
    """The weights on this rank's device; on a GPU with TF32 off (the checks
    compare float32 with float32, not with 10-bit matmuls)."""
    import torch

    if device != "cuda":
        return w
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", torch.cuda.current_device())
    return {name: t.to(dev) for name, t in w.items()}


def decoder_stages(worker: Any, seed: int, dtype: str, device: str, world_size: int) -> dict[str, Any]:
    """This rank's part of the sharded decoder's forward (``harness.conformance.models``): the
    hidden state after each stage and the logits, on the CPU. The shards are
    chosen by ``worker.rank`` and the caller's world size, as the MLP's are."""
    from harness.conformance import models

    w, shape, ids = _decoder_on(seed, dtype, device, world_size)
    out = models.sharded_decoder(w, shape, ids, int(worker.rank), world_size)
    return {name: t.cpu() for name, t in out.items()}


def decoder_greedy(worker: Any, seed: int, dtype: str, device: str, world_size: int, steps: int) -> list[int]:
    """``steps`` greedy tokens of the sharded decoder after its prompt, every rank
    in lockstep (each step's logits are gathered on every rank)."""
    from harness.conformance import models

    w, shape, ids = _decoder_on(seed, dtype, device, world_size)
    rank = int(worker.rank)
    return models.greedy_decode(lambda s: models.sharded_decoder(w, shape, s, rank, world_size)["logits"], ids, steps)


#: The pipelines whose stage this process holds, by rank and what makes them
#: (seed, dtype, device, tp, pp): their weights, stage group and link, kept
#: from call to call as a worker keeps its model between engine steps.
_PIPELINES: dict[tuple[Any, ...], dict[str, Any]] = {}


def _pipeline(worker: Any, seed: int, dtype: str, device: str, tp: int, pp: int) -> dict[str, Any]:
    """This rank's stage of the decoder in ``pp`` stages of ``tp`` ranks, made on its
    first call (every rank's first call makes the stage groups, together)."""
    from harness.conformance import models

    rank = int(worker.rank)
    key = (rank, seed, dtype, device, tp, pp)
    _one_thread()
    if key not in _PIPELINES:
        par = models.Parallelism(tp, pp)
        shape = models.DecoderShape.for_pipeline(par)
        _PIPELINES[key] = {
            "par": par,
            "shape": shape,
            "w": _on_device(models.decoder_weights(seed, shape, dtype), device),
            "comm": models.stage_collectives(par, rank),
            "link": models.point_to_point(),
        }
    return _PIPELINES[key]


def pipeline_stages(worker: Any, seed: int, dtype: str, device: str, tp: int, pp: int) -> dict[str, Any]:
    """This rank's stages of one forward of the prompt through the decoder in
    stages (``harness.conformance.models.pipelined_decoder``), on the CPU."""
    from harness.conformance import models

    p = _pipeline(worker, seed, dtype, device, tp, pp)
    ids = models.decoder_prompt(seed, p["shape"])
    out = models.pipelined_decoder(p["w"], p["shape"], ids, int(worker.rank), p["par"], p["comm"], p["link"])
    return {name: t.cpu() for name, t in out.items()}


def pipeline_step(
    worker: Any, seed: int, dtype: str, device: str, tp: int, pp: int, stream: int, step: int, ids: list[int]
) -> tuple[int, int, int, Any]:
    """One engine step of a request stream through this rank's stage: (rank,
    stream, step, the logits of every position on the last stage, else None).
    A stage before the last returns once its send is under way, free for the
    next step while later stages still run this one."""
    from harness.conformance import models

    p = _pipeline(worker, seed, dtype, device, tp, pp)
    out = models.pipelined_decoder(p["w"], p["shape"], list(ids), int(worker.rank), p["par"], p["comm"], p["link"])
    logits = out.get("logits")
    return int(worker.rank), stream, step, None if logits is None else logits.cpu()


def pipeline_release(worker: Any, seed: int, dtype: str, device: str, tp: int, pp: int) -> int:
    """Waits for this rank's sends of the pipeline, then forgets it; the number
    of sends that were still under way."""
    p = _PIPELINES.pop((int(worker.rank), seed, dtype, device, tp, pp), None)
    if p is None:
        return 0
    pending = len(p["link"].pending) if hasattr(p["link"], "pending") else 0
    if hasattr(p["link"], "flush"):
        p["link"].flush()
    return pending


def device_work(worker: Any, tag: int, launches: int, device: str, size: int = 1 << 14) -> tuple[int, Any]:
    """Queues ``launches`` rounds of kernels on this rank's device (an add to the
    result, and a matmul that keeps the device busy), then returns (rank, the
    result copied to the CPU): every entry ``tag + launches`` once the kernels ran."""
    import torch

    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    x = torch.full((size,), float(tag), device=dev)
    busy = torch.eye(1024 if device == "cuda" else 64, device=dev)
    for _ in range(launches):
        x += 1
        busy = torch.tanh(busy @ busy)
    return int(worker.rank), x.cpu()


def cuda_device(worker: Any) -> tuple[int, str]:
    """(torch.cuda.current_device(), that device's UUID): which GPU this rank computes on,
    named the same way in every process whatever its CUDA_VISIBLE_DEVICES."""
    import torch

    index = torch.cuda.current_device()
    return index, f"GPU-{torch.cuda.get_device_properties(index).uuid}"


def _refuse_unpickling() -> None:
    raise RuntimeError("this object cannot be unpickled (by design)")


class _LoadsBadly:
    """Pickles fine; unpickling it raises."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _refuse_unpickling, ()


def result_the_caller_cannot_unpickle(worker: Any) -> Any:
    """A result that pickles in the worker and fails to unpickle in the caller."""
    return _LoadsBadly()


def _module_only_the_workers_have(module: str) -> Any:
    """``module``, made in this process at run time (once), with a class and an
    exception class: they pickle by reference here, and a caller without that
    module cannot load them."""
    import sys
    import types

    made = sys.modules.get(module)
    if made is None:
        made = types.ModuleType(module)
        exec("class OnlyInTheWorkers:\n    pass\n\nclass OnlyInTheWorkersError(Exception):\n    pass\n", made.__dict__)
        sys.modules[module] = made
    return made


def result_of_a_class_only_the_workers_have(worker: Any, module: str) -> Any:
    """An instance of a class only the workers can import (C20)."""
    return _module_only_the_workers_have(module).OnlyInTheWorkers()


def raise_a_class_only_the_workers_have(worker: Any, rank: int, module: str, message: str) -> int:
    """On ``rank``, raise an exception whose class only the workers can import (C6)."""
    if worker.rank == rank:
        raise _module_only_the_workers_have(module).OnlyInTheWorkersError(message)
    return int(worker.rank)


# ---- issue 9: clause sentences (C15, C24) ----------------------------------------


def dist_backend(worker: Any) -> str:
    """The backend of the default process group (``torch.distributed.get_backend()``)."""
    import torch.distributed as dist

    return str(dist.get_backend())


#: Calls ``record_call`` saw, in the order this process ran them, per (key, rank).
_RECORDED: dict[tuple[str, int], list[Any]] = {}


def record_call(worker: Any, key: str, item: Any, seconds: float = 0.0) -> tuple[int, Any]:
    """Notes ``item`` in this rank's log under ``key`` (after sleeping ``seconds``), returns (rank, item)."""
    if seconds:
        time.sleep(seconds)
    _RECORDED.setdefault((key, int(worker.rank)), []).append(item)
    return int(worker.rank), item


def recorded_calls(worker: Any, key: str) -> list[Any]:
    """This rank's log under ``key``: the items of its ``record_call`` calls, in the order it ran them."""
    return list(_RECORDED.get((key, int(worker.rank)), []))


# ---- worker death, hung workers (C8, C9) ----------------------------------------


def all_reduce_without_rank(
    worker: Any, absent: int, marker_dir: str, keep_blocking: bool, device: str = "cpu"
) -> list[float]:
    """Every rank but ``absent`` blocks in an all_reduce that ``absent`` never joins.

    All ranks first meet in a barrier, then leave a file ``rank-<r>`` in
    ``marker_dir`` (so the caller knows the collective is under way); ``absent``
    then sleeps until it is killed. gloo fails the others' all_reduce once a peer
    dies; with ``keep_blocking`` they stay blocked instead, as ranks in a NCCL
    collective do when a peer dies: no survivor ever replies. ``device``: where
    the all_reduce's tensor lives ("cuda" on NCCL).
    """
    import threading
    from pathlib import Path

    import torch
    import torch.distributed as dist

    dist.barrier()
    leave(Path(marker_dir, f"rank-{worker.rank}"))
    if worker.rank == absent:
        time.sleep(3600)
    t = torch.ones(1, device=torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else "cpu")
    try:
        dist.all_reduce(t)
    except Exception:
        if not keep_blocking:
            raise
        threading.Event().wait()
    return [float(x) for x in t.cpu().tolist()]


def hang_in_native_code_on_rank(worker: Any, rank: int, marker: str) -> int:
    """On ``rank``: ignore SIGTERM, leave the file ``marker``, then block for good
    in a C call (a read from a pipe nobody writes). Other ranks return at once.

    SIGTERM is ignored through libc, process-wide, so that it holds whichever
    thread the worker runs calls on (Python's ``signal.signal`` needs the main
    thread). Only SIGKILL, or the worker's own exit from another thread, ends it.
    """
    if worker.rank != rank:
        return int(worker.rank)
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    sig_ign = 1
    if libc.signal(int(signal.SIGTERM), sig_ign) == ctypes.c_void_p(-1).value:
        raise OSError(ctypes.get_errno(), "signal(SIGTERM, SIG_IGN) failed")
    read_end, write_end = os.pipe()  # write_end stays open in this frame: the read never ends
    leave(marker)
    os.read(read_end, 1)
    os.close(write_end)
    return int(worker.rank)


# ---- idle workers (C25) ----------------------------------------------------------

#: This process's idle-CPU measurements, by (key, rank): the measuring thread and
#: what it found (filled in when its window ends). In this module, not on the
#: worker (which may refuse new attributes), and by rank as well, for backends
#: whose ranks share a process.
_IDLE_CPU: dict[tuple[str, int], tuple[Any, dict[str, Any]]] = {}


def _process_cpu_s() -> float:
    """The CPU time of this whole process so far (every thread, user and system)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def threads_runnable_ns() -> dict[int, tuple[int, int]]:
    """Per thread of this process: the nanoseconds it has spent on a CPU, and
    on a CPU or waiting for one (``/proc/self/task/<tid>/schedstat``); empty
    where the kernel keeps no such count."""
    out: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as f:
                on_cpu, waiting = f.read().split()[:2]
            out[int(tid)] = (int(on_cpu), int(on_cpu) + int(waiting))
        except (OSError, ValueError):
            continue
    return out


def busiest_thread(
    before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], wall_s: float, skip: int | None = None
) -> dict[str, Any]:
    """Of the threads alive at both ``threads_runnable_ns()`` readings (but
    ``skip``, the measuring thread), the one runnable longest between them:
    ``busiest_runnable`` and ``busiest_on_cpu``, its shares of ``wall_s``, and
    ``busiest_thread``, its name. Empty where ``/proc`` keeps no schedstat.
    A thread that never sleeps is runnable throughout, however little of a CPU a
    loaded machine gives it: this, not its CPU time, tells it from one that sleeps."""
    busiest = max(
        (
            (after[tid][1] - ns, after[tid][0] - on_cpu, tid)
            for tid, (on_cpu, ns) in before.items()
            if tid in after and tid != skip
        ),
        default=None,
    )
    if busiest is None or wall_s <= 0:
        return {}
    return {
        "busiest_runnable": busiest[0] / 1e9 / wall_s,
        "busiest_on_cpu": busiest[1] / 1e9 / wall_s,
        "busiest_thread": _thread_name(busiest[2]),
    }


def _thread_name(tid: int) -> str:
    """Thread ``tid`` of this process as Python and the kernel name it (a native
    thread's Python name, ``Dummy-1``, says little; the kernel's may say more)."""
    import threading

    python = next((t.name for t in threading.enumerate() if t.native_id == tid), None)
    try:
        with open(f"/proc/self/task/{tid}/comm", encoding="utf-8", errors="replace") as f:
            kernel = f.read().strip()
    except OSError:
        kernel = None
    if python and kernel and kernel != python:
        return f"{python} ({kernel})"
    return python or kernel or f"tid {tid}"


def idle_windows(over_s: float, windows: int, skip: int | None = None) -> Iterator[dict[str, Any]]:
    """This whole process over ``windows`` windows of ``over_s`` one after the
    other, each figure yielded as its window ends (what follows a yield falls in
    the next window): ``cpu_s`` over ``wall_s``, ``began`` and ``ended``
    (wall-clock), ``pid``, and the busiest thread but ``skip``
    (:func:`busiest_thread`). C19 judges the caller so, C25 each rank."""
    runnable0, cpu0, t0, began = threads_runnable_ns(), _process_cpu_s(), time.monotonic(), time.time()
    for _ in range(windows):
        time.sleep(over_s)
        cpu1, t1, runnable1, ended = _process_cpu_s(), time.monotonic(), threads_runnable_ns(), time.time()
        figure = {"cpu_s": cpu1 - cpu0, "wall_s": t1 - t0, "began": began, "ended": ended, "pid": os.getpid()}
        figure.update(busiest_thread(runnable0, runnable1, t1 - t0, skip=skip))
        yield figure
        runnable0, cpu0, t0, began = runnable1, cpu1, t1, ended


def measure_idle_cpu(worker: Any, key: str, after_s: float, over_s: float, windows: int = 1) -> int:
    """Starts a thread that, ``after_s`` from now, measures this rank's whole
    process over ``over_s``, and again over each of ``windows - 1`` more such
    windows one after the other (an idle state lasts: a worker that starts
    polling only after seconds of idle shows in a later window); returns at once.

    Two figures: the CPU time of the process (every thread, ``getrusage``), and
    of its busiest thread, how much of the window it was runnable (on a CPU or
    waiting for one, from ``/proc``'s schedstat) and how much of it on a CPU: a
    thread that never sleeps is runnable throughout, however little of a CPU a
    loaded machine gives it. The
    caller makes no call meanwhile, so the window sees the worker idle; the
    measuring thread sleeps throughout and is not counted as the busiest.
    ``idle_cpu_measured`` collects the figures."""
    import threading

    from harness.system.leaks import SUITE_THREAD_PREFIX

    found: dict[str, Any] = {}

    def measure() -> None:
        time.sleep(after_s)
        figures = list(idle_windows(over_s, max(1, windows), skip=threading.get_native_id()))
        # The first window's figure at the top, the later ones under "later".
        found.update(figures[0], later=figures[1:])

    # Named as the suite's own threads are: for a rank in the caller's process
    # (uni), the leak check after the test does not count it.
    thread = threading.Thread(target=measure, name=f"{SUITE_THREAD_PREFIX}-c25-idle-cpu", daemon=True)
    _IDLE_CPU[(key, int(worker.rank))] = (thread, found)
    thread.start()
    return int(worker.rank)


def idle_cpu_measured(worker: Any, key: str, wait_s: float) -> dict[str, Any]:
    """What ``measure_idle_cpu(key)`` found in this rank's process: ``cpu_s``
    over ``wall_s`` (the window began at ``began`` and ended at ``ended``,
    wall-clock times), the busiest thread's name, runnable share and on-CPU
    share of the window (absent where ``/proc`` has no schedstat), the same of
    each later window under ``later``, and ``arrived``, when this call came.
    Its thread is waited for up to ``wait_s`` if its windows have not ended
    yet. ``missing``: why there is no figure."""
    arrived = time.time()
    entry = _IDLE_CPU.pop((key, int(worker.rank)), None)
    if entry is None:
        return {"missing": f"no measurement was started in this process (pid {os.getpid()})", "pid": os.getpid()}
    thread, found = entry
    thread.join(wait_s)
    if not found:
        return {
            "missing": f"its measuring thread had not ended {wait_s:g} s after the collecting call came",
            "pid": os.getpid(),
        }
    return {**found, "arrived": arrived}
