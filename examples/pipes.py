"""A complete executor backend, written to be read (docs/implementers.md, section 1).

Run the suite against it from the repository root: ``python -m harness conform --backend examples.pipes:factory``.
One duplex ``multiprocessing`` pipe per rank, plain pickle on both sides::

    caller thread                       writer thread                  worker r (forked, one per rank)
    collective_rpc: pickle the call, ─► outbox ─► send it down ──pipe r──► recv ─ run ─ send the reply ─┐
      number it, queue it; return         every pipe, in order                                          │
      its Future or wait on it          reader thread                                                   │
        ▲ settled ◄─────────────────── wait(pipes, sentinels, wake-up pipe; next deadline) ◄──pipe r────┘

The k-th reply of rank r answers the k-th call: no call ids. A call completes when its last rank
answers, hence in submission order (C5). Past its deadline its future fails with TimeoutError, even
while the writer is stuck on a worker that does not read, and its late replies are dropped (C7).
Process group: torch's file store on a memfd (a file with no name, inherited by the forked workers:
nothing listens for it, nothing of it outlives a killed caller); gloo's peer sockets on loopback (C23).
A worker's death: its pipe reads EOF (or a reset) or its sentinel turns readable, and the reader fails
every call and runs the failure callbacks, once (C8). The caller's death: an idle worker reads EOF; a
busy or hung one gets SIGKILL from the kernel (PR_SET_PDEATHSIG, armed where the executor is made on
the main thread, which lives as long as the process) (C13). Nothing spins: the threads block in
wait() and get(), an idle worker in recv() (C19, C25).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import multiprocessing
import multiprocessing.util
import os
import pickle
import queue
import signal
import threading
import time
import traceback
import weakref
from concurrent.futures import Future, InvalidStateError
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from typing import Any

import harness
from harness import ExecutorConfig


class Worker:
    """What calls run on. SPEC.md asks for an int ``rank``, and for the default process group."""

    def __init__(self, rank: int) -> None:
        self.rank = rank


def _worker_main(rank: int, config: ExecutorConfig, conn: Connection, store_fd: int, pdeathsig: bool) -> None:
    if pdeathsig:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the caller's thread (C13)
    os.environ.update(config.env)
    harness.register_stacks()  # a hung test's report shows this worker's stacks
    try:
        if os.environ.get("HARNESS_FAIL_WORKER_INIT") == str(rank):  # C22's fault injection
            raise RuntimeError(f"rank {rank}: start-up failure injected by HARNESS_FAIL_WORKER_INIT={rank}")
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        import torch
        import torch.distributed as dist

        if config.device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        store, timeout = f"file:///proc/self/fd/{store_fd}", timedelta(seconds=config.init_timeout_s)  # the memfd
        dist.init_process_group(config.dist_backend, store, timeout=timeout, world_size=config.world_size, rank=rank)
        worker, ready = Worker(rank), (True, "")
    except BaseException:  # noqa: BLE001 - the caller raises it
        ready = (False, traceback.format_exc())
    conn.send_bytes(pickle.dumps(ready))
    with contextlib.suppress(EOFError, OSError):  # the caller is gone
        while ready[0] and (request := conn.recv_bytes()):  # b"": shut down
            conn.send_bytes(_run(worker, request))


def _run(worker: Worker, request: bytes) -> bytes:
    """One request in, one pickled reply out: ``(True, value)`` or ``(False, error)``. Never raises."""
    try:
        method, args, kwargs, reply_rank = pickle.loads(request)
        fn = getattr(worker, method) if isinstance(method, str) else functools.partial(method, worker)
        value = fn(*args, **(kwargs or {}))
        return pickle.dumps((True, value if reply_rank in (None, worker.rank) else None))
    except BaseException as exc:  # noqa: BLE001 - an unpicklable result lands here too (C20)
        return pickle.dumps((False, (type(exc).__name__, str(exc), traceback.format_exc())))


class _Call:
    def __init__(self, name: str, reply_rank: int | None, timeout: float | None) -> None:
        self.name, self.reply_rank, self.timeout, self.replies = name, reply_rank, timeout, dict[int, bytes]()
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.future: Future[Any] = Future()

    def settle(self, value: Any = None, error: BaseException | None = None) -> None:
        with contextlib.suppress(InvalidStateError):  # timed out (or cancelled) already
            self.future.set_result(value) if error is None else self.future.set_exception(error)


class _Group:
    """Workers, pipes, threads and pending calls; apart from the executor, so that dropping it closes them (C12)."""

    def __init__(self, config: ExecutorConfig) -> None:
        self.config, self.lock, self.n = config, threading.Lock(), config.world_size
        self.calls: dict[int, _Call] = {}  # by sequence number, until every rank has answered
        self.sent, self.answered, self.callbacks = 0, [0] * self.n, list[Any]()
        self.error: Exception | None = None
        self.closed, self.conns, self.procs = False, list[Connection](), list[Any]()
        self.outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.store_fd = os.memfd_create("pipes-store")
        self.reader = threading.Thread(target=self._read, name="pipes-reader", daemon=True)
        self.writer = threading.Thread(target=self._write, name="pipes-writer", daemon=True)
        multiprocessing.util.register_after_fork(self, _Group._close_in_child)

    def _close_in_child(self) -> None:  # a worker holds no caller end: the caller's death reads as EOF
        for conn in self.conns if not self.closed else ():
            conn.close()

    def start(self) -> None:
        ctx, on_main = multiprocessing.get_context("fork"), threading.current_thread() is threading.main_thread()
        for rank in range(self.n):
            mine, theirs = ctx.Pipe()
            self.conns.append(mine)
            args = (rank, self.config, theirs, self.store_fd, on_main)
            proc = ctx.Process(target=_worker_main, args=args, name=f"pipes-{rank}", daemon=True)
            proc.start()
            self.procs.append(proc)
            theirs.close()
        waiting, deadline = dict(enumerate(self.conns)), time.monotonic() + self.config.init_timeout_s
        while waiting:  # every rank at once: one that fails leaves the others blocked in the store
            if not (ready := wait(list(waiting.values()), max(0.0, deadline - time.monotonic()))):
                raise harness.WorkerInitError(f"ranks {list(waiting)}: not started in {self.config.init_timeout_s} s")
            for rank in [r for r, conn in waiting.items() if conn in ready]:
                try:
                    ok, detail = pickle.loads(waiting.pop(rank).recv_bytes())
                except EOFError:
                    ok, detail = False, "its process exited"
                if not ok:
                    raise harness.WorkerInitError(f"rank {rank}: worker failed to start: {detail}")
        self.reader.start()
        self.writer.start()

    def send(self, call: _Call, body: bytes) -> None:
        with self.lock:  # numbered and queued together: every rank gets the calls in this order
            if self.closed or self.error is not None:
                raise self.error or harness.ExecutorShutdownError("the executor was shut down")
            self.calls[self.sent], self.sent = call, self.sent + 1
            self.outbox.put(body)
        if call.deadline is not None:  # the reader's wait ends at this deadline
            with contextlib.suppress(BlockingIOError):
                os.write(self.wake_w, b"\0")

    def _write(self) -> None:
        while True:
            body = self.outbox.get()  # None: shut down; the workers get b"", which stops them
            for conn in self.conns:
                with contextlib.suppress(OSError):  # a dead worker: the reader reports it
                    conn.send_bytes(body or b"")
            if body is None:
                return

    def _read(self) -> None:
        sentinels = [p.sentinel for p in self.procs]
        while True:
            ready = wait([self.wake_r, *self.conns, *sentinels], self._expire())
            if self.closed:
                return
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
            for rank, conn in enumerate(self.conns):
                if conn in ready:  # replies first: those a worker sent before it died still count
                    try:
                        self._reply(rank, conn.recv_bytes())
                    except (EOFError, ConnectionResetError):  # reset: it died with requests unread
                        return self._fail(rank)
                elif sentinels[rank] in ready:
                    return self._fail(rank)

    def _expire(self) -> float | None:
        """Fail the calls past their deadline (C7); return the seconds until the next one."""
        with self.lock:
            timed = [(c.deadline - time.monotonic(), c) for c in self.calls.values() if c.deadline is not None]
        for left, call in timed:
            if left <= 0:
                call.settle(error=harness.RPCTimeoutError(f"{call.name!r} timed out after {call.timeout} s"))
        return min([left for left, call in timed if left > 0], default=None)

    def _reply(self, rank: int, raw: bytes) -> None:
        with self.lock:
            seq, self.answered[rank] = self.answered[rank], self.answered[rank] + 1
            call = self.calls.get(seq)  # None: failed or shut down meanwhile
            if call is None:
                return
            call.replies[rank] = raw
            if len(call.replies) < self.n:
                return
            del self.calls[seq]
        try:
            outcomes = [pickle.loads(call.replies[r]) for r in range(self.n)]
        except Exception as exc:  # noqa: BLE001 - e.g. a result class the caller cannot import
            return call.settle(error=harness.SerializationError(f"a result could not be unpickled: {exc!r}"))
        errors = [harness.RemoteCallError(r, call.name, *v) for r, (ok, v) in enumerate(outcomes) if not ok]
        values = [value for _, value in outcomes]
        call.settle(values if call.reply_rank is None else values[call.reply_rank], next(iter(errors), None))

    def _fail(self, rank: int) -> None:
        with self.lock:
            if self.error is not None or self.closed:
                return
            self.procs[rank].join(1)
            self.error = harness.WorkerDiedError(rank, self.procs[rank].pid, self.procs[rank].exitcode)
            calls, callbacks, self.calls, self.callbacks = list(self.calls.values()), self.callbacks, {}, []
        for call in calls:
            call.settle(error=self.error)
        for callback in callbacks:
            with contextlib.suppress(Exception):  # one bad callback must not stop the others
                callback()

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed, calls, self.calls = True, list(self.calls.values()), {}
        for call in calls:
            call.settle(error=harness.ExecutorShutdownError("the executor was shut down"))
        self.outbox.put(None)
        with contextlib.suppress(BlockingIOError):
            os.write(self.wake_w, b"\0")  # the reader returns
        for stop in ("join", "terminate", "kill"):  # a hung worker that ignores SIGTERM gets SIGKILL (C9)
            alive, deadline = [p for p in self.procs if p.exitcode is None], time.monotonic() + 2
            for p in alive:
                getattr(p, stop)() if stop != "join" else None
            for p in alive:
                p.join(max(0.0, deadline - time.monotonic()))
        for thread in (self.reader, self.writer):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(5)  # the writer returns once the last worker is gone, if not before
        for p in self.procs:
            p.close()
        for conn in self.conns:
            conn.close()
        for fd in (self.wake_r, self.wake_w, self.store_fd):
            os.close(fd)


class PipeExecutor:
    """SPEC.md's API over a ``_Group``."""

    def __init__(self, config: ExecutorConfig) -> None:
        if config.world_size < 1:  # the config checks it too; a config can be built around its check
            raise ValueError(f"world_size must be >= 1, got {config.world_size}")
        self.world_size, self._group = config.world_size, _Group(config)
        self._finalizer = weakref.finalize(self, self._group.close)  # runs once: at shutdown() or when dropped
        try:
            self._group.start()
        except BaseException:
            self._finalizer()
            raise

    def collective_rpc(
        self,
        method: Any,
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        non_block: bool = False,
        unique_reply_rank: int | None = None,
    ) -> Any:
        name = method if isinstance(method, str) else getattr(method, "__qualname__", repr(method))
        if self._group.closed:
            raise harness.ExecutorShutdownError(f"collective_rpc({name!r}): the executor was shut down")
        if unique_reply_rank is not None and not 0 <= unique_reply_rank < self.world_size:
            raise ValueError(f"unique_reply_rank must be in [0, {self.world_size}), got {unique_reply_rank!r}")
        try:
            body = pickle.dumps((method, tuple(args), kwargs, unique_reply_rank))
        except Exception as exc:
            raise harness.SerializationError(f"collective_rpc({name!r}): cannot pickle the call: {exc}") from exc
        call = _Call(name, unique_reply_rank, timeout)
        self._group.send(call, body)
        return call.future if non_block else call.future.result()

    def check_health(self) -> None:
        if self._group.closed:
            raise harness.ExecutorShutdownError("check_health(): the executor was shut down")
        for rank, proc in enumerate(self._group.procs):
            if wait([proc.sentinel], 0):  # exited: the reader may not have seen it yet
                self._group._fail(rank)
        if self._group.error is not None:
            raise self._group.error

    def register_failure_callback(self, callback: Any) -> None:
        with self._group.lock:
            if self._group.error is None:
                self._group.callbacks.append(callback)
                return
        callback()  # failed already: it runs now, once

    def shutdown(self) -> None:
        self._finalizer()

    def __enter__(self) -> PipeExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def factory(config: ExecutorConfig) -> PipeExecutor:
    return PipeExecutor(config)


# Forked workers need no import by name; nothing is declared unsupported: every clause is checked.
harness.declare(factory, start_methods=("fork",), unsupported={})
