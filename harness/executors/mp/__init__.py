"""``mp``: the reference executor. One worker process per rank, driven from the caller's thread.

Data flow::

    caller thread ─ collective_rpc ─► request ring (shm, 1 writer → N readers) ─► worker 0 … N-1
         ▲            │ one write per call, any world size                          │
         │            ▼ pending call registered                                     │
         └─ FutureQueue: FIFO, drained inside result() on the caller's thread ◄─ reply ring per rank

    wake-ups: after a call (a reply) each side looks at its ring for a while
    (10 ms on a worker, 1 ms in the caller, yielding the core between looks),
    then sleeps on a pipe. A byte goes down the pipe only to a side that
    sleeps, as this handshake decides (a lost wake-up would hang a call):

        sleeper: raise its flag (in the ring) ─ drain its pipe ─ look at the ring ─ sleep
        sender:  publish the message ─ yield the core ─ flag raised? write a byte

    Each side's middle step is a system call that takes a lock in the kernel
    (a pipe's, the run queue's): on x86-64 a full fence. So either the
    sender sees the flag and the byte wakes the sleeper, or the sleeper's
    look finds the message. A side that spins gets no bytes, and spends no
    system call on them. The yield after publishing also hands the core over:
    with more processes than cores, the one that shares the core and waits
    for that message runs sooner.

    monitor thread: blocks on the worker sentinels (no spinning); on a death it
    fails every pending call and runs the failure callbacks, once.
    death pipe: the workers hold its read end; when the caller closes it or
    dies, every worker exits at once (C9, C13). On Linux the kernel also
    SIGKILLs a worker whose parent dies (PR_SET_PDEATHSIG), whatever it does:
    blocked on a full reply ring, hung in native code ignoring SIGTERM (C13).

Nothing here listens on a socket: the process group meets through a file store
(a memfd: a file with no name), and gloo is pinned to loopback (C23). Nothing
is left behind by a SIGKILLed caller (C13): the store has no name, and the
rings' names are removed once every worker has attached.

This package holds the executor (here), its shared-memory rings (``shm``) and
its worker process (``worker``, whose ``Worker``, ``run_call`` and
``init_distributed`` ``uni`` and ``ray`` use too). It may import what
``harness.executors`` may.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import selectors
import shutil
import signal
import tempfile
import threading
import time
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess

from harness.contract import (
    ExecutorConfig,
    ExecutorError,
    ExecutorShutdownError,
    RPCTimeoutError,
    WorkerDiedError,
    WorkerInitError,
    declare,
)
from harness.executors._group import Failure, GroupExecutor
from harness.executors.futures import FutureQueue, PendingCall, Reply
from harness.executors.mp.shm import RingReader, RingWriter
from harness.executors.mp.worker import (
    SHUTDOWN_CALL_ID,
    StoreFile,
    WorkerSpec,
    decode_reply,
    drain,
    encode_request,
    request_header,
    worker_main,
)

__all__ = ["MultiprocExecutor", "create"]

_GRACEFUL_EXIT_S = 2.0
_FORCED_EXIT_S = 3.0
# While the request ring is full, how long one wait for replies may block before
# the ring is looked at again (workers free slots without replying).
_RING_FULL_WAIT_S = 0.002
_FORKSERVER_PRELOAD = ("torch", "torch.distributed", "harness.executors.mp.worker")
#: Preloaded last, only where the server starts from the main thread: it dies with the caller.
_FORKSERVER_GUARD = "harness.executors.mp._forkserver_guard"
# Slots of each rank's reply ring (each of the request ring's slot size).
_REPLY_SLOTS = 8


class _Group:
    """Everything one executor owns. Kept apart from the executor object so that
    ``weakref.finalize`` can close it when the executor is dropped (C12)."""

    def __init__(
        self,
        config: ExecutorConfig,
        ring_slots: int,
        slot_size: int,
        spin_s: float,
        worker_spin_s: float,
    ) -> None:
        self.config = config
        self.spin_s = spin_s
        self.worker_spin_s = worker_spin_s
        self.closed = False
        self._close_lock = threading.Lock()
        self.failure = Failure()
        self.processes: list[BaseProcess] = []
        self.pids: list[int | None] = []
        # The process group's file store: a memfd where there is one (nothing in
        # the file system to outlive a SIGKILLed caller), else a private folder.
        self.store_fd = -1
        self.tmpdir: str | None = None
        if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
            self.store_fd = os.memfd_create("harness-mp-store", os.MFD_CLOEXEC)
        else:
            self.tmpdir = tempfile.mkdtemp(prefix="harness-mp-")
        self.ring = RingWriter(config.world_size, ring_slots, slot_size)
        # Reply rings: created (and unlinked) here, written by the workers.
        self.reply_owners: list[RingWriter] = []
        self.reply_readers: list[RingReader] = []
        for _ in range(config.world_size):
            owner = RingWriter(1, _REPLY_SLOTS, slot_size)
            self.reply_owners.append(owner)
            self.reply_readers.append(RingReader(owner.handle, 0))
        self.queue = FutureQueue(self._receive)
        self.selector: selectors.BaseSelector | None = None
        self.wake_conns: list[multiprocessing.connection.Connection] = []
        self.wake_fds: list[int] = []
        self._sending: PendingCall | None = None
        self._notify_fd = -1
        self.death_w: multiprocessing.connection.Connection | None = None
        self.notify_r: multiprocessing.connection.Connection | None = None
        self.monitor: threading.Thread | None = None
        self._stop_r, self._stop_w = os.pipe()

    # ---- start-up ---------------------------------------------------------

    def start(self) -> None:
        cfg = self.config
        ctx: BaseContext = multiprocessing.get_context(cfg.start_method)
        # The kernel ends a worker with the thread that started it (C13): with a
        # fork server, that is the server's main thread; otherwise it is this
        # thread, which must then be one that lives as long as the process.
        by_kernel = cfg.start_method == "forkserver" or threading.current_thread() is threading.main_thread()
        expected_parent = None if cfg.start_method == "forkserver" else os.getpid()
        store = StoreFile(self.store_fd) if self.store_fd >= 0 else None
        if cfg.start_method == "forkserver":
            _forkserver_users.enter()
            # The fork server imports these once; each worker forked from it
            # then starts in milliseconds instead of importing torch again.
            # (No effect once this process's fork server runs: it keeps its own.)
            guard = [_FORKSERVER_GUARD] if threading.current_thread() is threading.main_thread() else []
            ctx.set_forkserver_preload([*_FORKSERVER_PRELOAD, *guard])  # type: ignore[attr-defined]
        death_r, self.death_w = ctx.Pipe(duplex=False)
        self.notify_r, notify_w = ctx.Pipe(duplex=False)
        os.set_blocking(self.notify_r.fileno(), False)
        self._notify_fd = self.notify_r.fileno()
        child_ends: list[multiprocessing.connection.Connection] = [death_r, notify_w]
        for rank in range(cfg.world_size):
            spec = WorkerSpec(
                rank=rank,
                world_size=cfg.world_size,
                device=cfg.device,
                dist_backend=cfg.dist_backend,
                store_path=os.path.join(self.tmpdir, "store") if self.tmpdir is not None else "",
                env=dict(cfg.env),
                init_timeout_s=cfg.init_timeout_s,
                ring=self.ring.handle,
                reply_ring=self.reply_owners[rank].handle,
                spin_s=self.worker_spin_s,
            )
            wake_r, wake_w = ctx.Pipe(duplex=False)
            # A forked child inherits the caller's end of the death pipe; it must
            # close it, or the pipe never reports the caller's death.
            inherited = [self.death_w.fileno()] if cfg.start_method == "fork" else []
            proc = ctx.Process(  # type: ignore[attr-defined]
                target=worker_main,
                args=(spec, death_r, wake_r, notify_w, inherited, store, expected_parent, by_kernel),
                name=f"harness-mp-rank{rank}",
                daemon=True,
            )
            proc.start()
            self.processes.append(proc)
            self.pids.append(proc.pid)
            os.set_blocking(wake_w.fileno(), False)
            self.wake_conns.append(wake_w)
            self.wake_fds.append(wake_w.fileno())
            child_ends.append(wake_r)
        for conn in child_ends:
            conn.close()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.notify_r.fileno(), selectors.EVENT_READ, ("reply", -1))
        # shutdown() from another thread wakes a caller blocked in a call.
        self.selector.register(self._stop_r, selectors.EVENT_READ, ("stop", -1))
        for rank, proc in enumerate(self.processes):
            self.selector.register(proc.sentinel, selectors.EVENT_READ, ("exit", rank))
        self._wait_ready()
        # Every worker has attached to the rings: their names can go, so that a
        # SIGKILLed caller leaves nothing in /dev/shm (the mappings stay valid).
        self.ring.unlink()
        for owner in self.reply_owners:
            owner.unlink()
        self.monitor = threading.Thread(target=self._monitor, name="harness-mp-monitor", daemon=True)
        self.monitor.start()

    def _wait_ready(self) -> None:
        timeout = self.config.init_timeout_s
        deadline = time.monotonic() + timeout
        waiting = set(range(self.config.world_size))
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerInitError(f"ranks {sorted(waiting)}: worker not ready after init_timeout_s={timeout:g} s")
            replies, dead = self._collect(remaining)
            for reply in replies:
                if reply.error is not None:
                    _, message, tb = reply.error
                    raise WorkerInitError(
                        f"rank {reply.rank}: worker failed to start: {message}\n"
                        f"--- remote traceback (rank {reply.rank}) ---\n{tb}"
                    )
                self.pids[reply.rank] = reply.value
                waiting.discard(reply.rank)
            for rank in dead:
                if rank in waiting:
                    proc = self.processes[rank]
                    proc.join(1)
                    raise WorkerInitError(
                        f"rank {rank}: worker process (pid {proc.pid}) exited during start-up "
                        f"with exit code {proc.exitcode}"
                    )

    # ---- calls ------------------------------------------------------------

    def wake(self) -> None:
        """Called after each chunk written to the request ring: yield the core,
        then wake the workers that sleep."""
        # Hand the core over now, not after the bookkeeping on the way to the
        # wait: where a worker shares the caller's core, it starts the call
        # sooner. The yield is also the fence of the handshake (module docstring):
        # the ring's stores are visible before the flags are read.
        os.sched_yield()
        ring = self.ring
        for rank, fd in enumerate(self.wake_fds):
            if ring.reader_asleep(rank):
                try:
                    os.write(fd, b"\0")
                except (BlockingIOError, BrokenPipeError):
                    pass  # a wake-up is already pending, or the worker is gone (its sentinel says so)

    def send(self, call: PendingCall, body: bytes) -> None:
        """Write one registered call into the request ring (under the queue lock)."""
        before = self.ring.chunks_written
        self._sending = call
        try:
            self.ring.write(body, self._wait_for_space, self.wake, prefix=request_header(call.call_id))
        except BaseException as exc:
            queue, name, timeout = self.queue, call.method, call.timeout
            if self.ring.chunks_written != before:
                # Half a message sits in the ring (a timeout, Ctrl-C, a dead
                # worker…): the next request would be read as its continuation.
                error = ExecutorError(
                    f"collective_rpc({name!r}) was interrupted half-way through sending a request "
                    f"({type(exc).__name__}); the executor cannot be used any more"
                )
                queue.fail_all(error)
                if isinstance(exc, _RingTimeout):
                    # C7: the call itself timed out, whatever it leaves behind; the
                    # later calls fail saying why (a chaos run found it: a worker
                    # stopped by SIGSTOP while a 24 MiB request was being written).
                    raise RPCTimeoutError(
                        f"ranks {self.ring.lagging_readers()}: collective_rpc({name!r}) timed out after "
                        f"{timeout:g} s half-way through sending its request (workers not reading); "
                        "the executor cannot be used any more"
                    ) from exc
                raise error from exc
            queue.discard(call)
            if isinstance(exc, _RingTimeout):
                raise RPCTimeoutError(
                    f"ranks {self.ring.lagging_readers()}: collective_rpc({name!r}) timed out "
                    f"after {timeout:g} s waiting to send (workers not reading)"
                ) from None
            raise
        finally:
            self._sending = None  # not kept: the call will hold its result

    def _wait_for_space(self) -> None:
        # The request ring is full while self._sending is being written (under
        # the queue lock, so one call at a time): take replies meanwhile.
        deadline = self._sending.deadline if self._sending is not None else None
        if deadline is not None and time.monotonic() >= deadline:
            raise _RingTimeout
        self.queue.pump(_RING_FULL_WAIT_S)

    def _poll_replies(self) -> list[Reply]:
        # One reply per rank at most: a call needs one from each, and a second
        # look at every ring, which almost always finds nothing, would cost as
        # much as taking the replies. Later ones wait for the next look.
        replies = []
        for reader in self.reply_readers:
            raw = reader.poll()
            if raw is not None:
                replies.append(decode_reply(raw))
        return replies

    def _collect(self, timeout: float | None) -> tuple[list[Reply], list[int]]:
        """Replies that arrive within ``timeout`` s, and ranks seen dead meanwhile."""
        assert self.selector is not None and self.notify_r is not None
        replies = self._poll_replies()
        if replies or timeout == 0:
            return replies, []
        if self.spin_s > 0:
            # A short spin before blocking: a reply due within microseconds is
            # taken without paying for a sleep and a wake-up.
            end = time.perf_counter() + (self.spin_s if timeout is None else min(self.spin_s, timeout))
            while time.perf_counter() < end:
                os.sched_yield()  # let a worker that shares this core run
                replies = self._poll_replies()
                if replies:
                    return replies, []
        # Raise the flags, drain the wake-ups, look once more, sleep: a reply
        # written after that look finds a flag raised and sends a fresh byte.
        for reader in self.reply_readers:
            reader.set_asleep(True)
        try:
            drain(self._notify_fd)  # a syscall: the fence between the flags and the look
            replies = self._poll_replies()
            if replies:
                return replies, []
            events = [key.data for key, _ in self.selector.select(timeout)]
        finally:
            for reader in self.reply_readers:
                reader.set_asleep(False)
        if ("stop", -1) in events:
            raise ExecutorShutdownError("the executor was shut down while the call was waiting")
        dead = [rank for kind, rank in events if kind == "exit"]
        # Replies sent before a death are delivered first.
        return self._poll_replies(), dead

    def _receive(self, timeout: float | None) -> list[Reply]:
        if self.closed:
            raise ExecutorShutdownError("executor was shut down")
        replies, dead = self._collect(timeout)
        if dead and not replies:
            # The sentinel stays ready, so a death behind replies is seen next time.
            raise self.fail(min(dead))
        return replies

    # ---- failure ----------------------------------------------------------

    def fail(self, rank: int) -> WorkerDiedError:
        """Record that ``rank`` died: fail every call, run the callbacks once."""

        def died() -> WorkerDiedError:
            proc = self.processes[rank]
            proc.join(1)
            return WorkerDiedError(rank, proc.pid, proc.exitcode)

        return self.failure.record(died, self.queue)

    def _monitor(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            sel.register(self._stop_r, selectors.EVENT_READ, None)
            for rank, proc in enumerate(self.processes):
                sel.register(proc.sentinel, selectors.EVENT_READ, rank)
            while True:
                for key, _ in sel.select():
                    if key.data is None or self.closed:
                        return
                    self.fail(key.data)
                    return
        finally:
            sel.close()

    def dead_rank(self) -> int | None:
        for rank, proc in enumerate(self.processes):
            if proc.exitcode is not None:
                return rank
        return None

    # ---- shutdown ---------------------------------------------------------

    def close(self) -> None:
        """Stop the workers and release everything. Idempotent, bounded (C9)."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
        # First wake whatever waits (a call blocked in another thread, the
        # monitor): the blocked call releases the queue, which fail_all needs.
        os.write(self._stop_w, b"x")
        self.queue.fail_all(ExecutorShutdownError("executor was shut down"))
        live = [p for p in self.processes if p.exitcode is None]
        if live and self.failure.error is None:
            try:
                if self.ring.has_space():
                    self.ring.write(encode_request(SHUTDOWN_CALL_ID, b""), _no_wait, self.wake)
            except Exception:  # noqa: BLE001 - the forced path below still stops them
                pass
            _join_all(live, _GRACEFUL_EXIT_S)
        if self.death_w is not None:
            self.death_w.close()  # every worker still alive exits now, even mid-call
        _join_all(self.processes, _FORCED_EXIT_S)
        for proc in self.processes:
            if proc.exitcode is None:
                proc.kill()
        _join_all(self.processes, _FORCED_EXIT_S)
        if self.monitor is not None and self.monitor is not threading.current_thread():
            self.monitor.join(_FORCED_EXIT_S)
        for proc in self.processes:
            if proc.exitcode is not None:
                proc.close()
        if self.selector is not None:
            self.selector.close()
        if self.notify_r is not None:
            self.notify_r.close()
        for reader in self.reply_readers:
            reader.close()
        for owner in self.reply_owners:
            owner.close()
        for conn in self.wake_conns:
            conn.close()
        os.close(self._stop_r)
        os.close(self._stop_w)
        self.ring.close()
        if self.store_fd >= 0:
            os.close(self.store_fd)
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        if self.config.start_method == "forkserver":
            _forkserver_users.leave()


class _ForkserverUsers:
    """The executors of this process that use Python's fork server. If the first
    of them started it, the last to shut down stops it, and waits for it to
    exit (bounded): it preloads torch, and left running, it outlives its
    caller's tests by seconds on a loaded machine. A fork server that ran
    before (someone else's) is left alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._ours = False

    def enter(self) -> None:
        from multiprocessing import forkserver

        with self._lock:
            if self._users == 0:
                server = getattr(forkserver, "_forkserver", None)
                self._ours = getattr(server, "_forkserver_pid", 0) is None
            self._users += 1

    def leave(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._ours:
                self._ours = False
                _stop_forkserver(_FORCED_EXIT_S)


def _stop_forkserver(timeout: float) -> None:
    """What CPython's ``multiprocessing.forkserver._forkserver._stop()`` does
    (3.10-3.13), with a bounded wait: closing its "alive" pipe asks it to exit;
    one still running at the deadline is killed."""
    from multiprocessing import forkserver, util

    server = getattr(forkserver, "_forkserver", None)
    lock = getattr(server, "_lock", None)
    if server is None or lock is None:
        return
    with lock:
        pid = getattr(server, "_forkserver_pid", None)
        alive_fd = getattr(server, "_forkserver_alive_fd", None)
        if pid is None or alive_fd is None:
            return
        os.close(alive_fd)
        server._forkserver_alive_fd = None
        deadline = time.monotonic() + timeout
        try:
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() >= deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.01)
        except ChildProcessError:
            pass  # reaped already
        server._forkserver_pid = None
        address = getattr(server, "_forkserver_address", None)
        if address is not None and not util.is_abstract_socket_namespace(address):
            with contextlib.suppress(OSError):
                os.unlink(address)
        server._forkserver_address = None


_forkserver_users = _ForkserverUsers()


def _no_wait() -> None:
    raise ExecutorError("request ring full")


def _join_all(procs: list[BaseProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for proc in procs:
        if proc.exitcode is None:
            proc.join(max(0.0, deadline - time.monotonic()))


class MultiprocExecutor(GroupExecutor):
    """The reference executor. See the module docstring for the data flow."""

    def __init__(
        self,
        config: ExecutorConfig,
        *,
        ring_slots: int = 32,
        slot_size: int = 128 * 1024,
        spin_s: float = 0.001,
        worker_spin_s: float = 0.01,
    ) -> None:
        super().__init__(config, lambda: _Group(config, ring_slots, slot_size, spin_s, worker_spin_s))


class _RingTimeout(Exception):
    pass


def create(config: ExecutorConfig) -> MultiprocExecutor:
    """The ``mp`` backend factory."""
    return MultiprocExecutor(config)


# Every start method this platform's multiprocessing offers. With "forkserver",
# the workers are forked by Python's forkserver process, which exits when the
# caller does; if an mp executor started it, the last one to shut down stops it
# (_ForkserverUsers), and one that ran before is left running (someone else's).
# "fork" first: the suite's default matrix runs a backend's first start method
# at every world size and the others at one. It is vLLM's MultiprocExecutor's
# default too (VLLM_WORKER_MULTIPROC_METHOD), and where it is not offered the
# next one leads.
declare(
    create,
    unsupported={},
    start_methods=[m for m in ("fork", "spawn", "forkserver") if m in multiprocessing.get_all_start_methods()],
)
