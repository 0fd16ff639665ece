"""The worker: the object calls run on, and the main loop of a worker process.

A worker process (started by the ``mp`` executor) does, in order::

    die with the caller ─ the kernel SIGKILLs the worker when its parent dies
                       (PR_SET_PDEATHSIG: even hung in native code, SIGTERM
                       ignored), and a thread blocks on the death pipe; EOF
                       (caller gone or shutdown) ends the process at once,
                       even mid-call or blocked on a full reply ring (C13)
    start up         ─ env, fault injection (C22), torch.distributed on a file
                       store (no listening store socket, C23), report ready
    loop             ─ read the request ring (looking for 10 ms after a call,
                       then sleeping on the wake-up pipe), run the call, write
                       the reply to this rank's reply ring, in order

Calls run one at a time in request order, so each rank's replies come back in
submission order; each reply names its call id.
"""

from __future__ import annotations

import os
import pickle
import selectors
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from harness.contract import FAIL_INIT_ENV
from harness.executors.futures import Reply
from harness.executors.mp.shm import RingHandle, RingReader, RingWriter
from harness.system.parent_death import signal_on_parent_death
from harness.system.stacks import register_from_env as register_stacks_from_env

__all__ = [
    "FAIL_INIT_ENV",
    "Request",
    "StoreFile",
    "Worker",
    "WorkerSpec",
    "decode_reply",
    "decode_request",
    "die_with_parent",
    "drain",
    "encode_reply",
    "encode_request",
    "init_distributed",
    "request_header",
    "run_call",
]


class Worker:
    """The object a string method is looked up on. Carries ``rank`` (SPEC.md)."""

    def __init__(self, rank: int, world_size: int, device: str) -> None:
        self.rank = rank
        self.world_size = world_size
        self.device = device

    def ping(self) -> int:
        """Returns the rank: the cheapest useful call."""
        return self.rank

    def pid(self) -> int:
        return os.getpid()


_CALL_ID = struct.Struct("<q")
SHUTDOWN_CALL_ID = -1
#: The id of the first reply of a worker: its pid once started, or its start-up error.
READY_CALL_ID = -2
# Builds a Reply from its four fields without the generated __new__: half the
# cost, on every reply, on both sides.
_new_reply = tuple.__new__


class Request(NamedTuple):
    """One call's body. On the wire it follows its call id (see ``encode_request``),
    so a body the worker cannot unpickle is still answered under the right id.
    Pickled as a plain tuple (``tuple(request)``): cheaper on every call."""

    method: str | Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] | None = None
    unique_reply_rank: int | None = None


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs to start, picklable for spawn."""

    rank: int
    world_size: int
    device: str
    dist_backend: str
    #: The file store's path; empty: the memfd passed to ``worker_main`` (``StoreFile``).
    store_path: str
    env: Mapping[str, str]
    init_timeout_s: float
    ring: RingHandle
    reply_ring: RingHandle
    spin_s: float = 0.0


def loopback_ifname() -> str:
    return "lo0" if sys.platform == "darwin" else "lo"


def init_distributed(
    rank: int,
    world_size: int,
    device: str,
    dist_backend: str,
    store_path: str,
    timeout_s: float,
    *,
    store: Any = None,
    ifname: str | None = None,
) -> None:
    """Initialise the default process group: over a file store at ``store_path``
    (nothing listens for it), or over ``store`` (a ``torch.distributed.Store``,
    for ranks on machines that share no file system), its peer sockets on
    ``ifname`` (default: loopback)."""
    if os.environ.get(FAIL_INIT_ENV) == str(rank):
        raise RuntimeError(f"rank {rank}: start-up failure injected by {FAIL_INIT_ENV}={rank}")
    # gloo and NCCL pick an interface for their peer sockets; pin them to loopback,
    # or to the node's cluster interface across nodes, unless the user chose one
    # (C23: nothing listens beyond loopback).
    os.environ.setdefault("GLOO_SOCKET_IFNAME", ifname or loopback_ifname())
    os.environ.setdefault("NCCL_SOCKET_IFNAME", ifname or loopback_ifname())
    import torch
    import torch.distributed as dist

    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    meet: dict[str, Any] = {"store": store} if store is not None else {"init_method": f"file://{store_path}"}
    dist.init_process_group(
        backend=dist_backend,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
        **meet,
    )


def request_header(call_id: int) -> bytes:
    """What precedes a request's body on the wire: its call id."""
    return _CALL_ID.pack(call_id)


def encode_request(call_id: int, body: bytes) -> bytes:
    return request_header(call_id) + body


def decode_request(raw: bytes | bytearray) -> tuple[int, memoryview]:
    return _CALL_ID.unpack_from(raw, 0)[0], memoryview(raw)[_CALL_ID.size :]


def run_call(worker: Worker, call_id: int, request: Request | tuple[Any, ...]) -> Reply:
    """Run one request (a ``Request``, or the plain tuple it pickles as) on
    ``worker``; never raises (errors become the reply)."""
    try:
        method, args, kwargs, unique_reply_rank = request
        if isinstance(method, str):
            fn = getattr(worker, method, None)
            if fn is None:
                raise AttributeError(
                    f"worker of rank {worker.rank} has no method {method!r} ({type(worker).__qualname__})"
                )
            value = fn(*args, **kwargs) if kwargs else fn(*args)
        else:
            value = method(worker, *args, **kwargs) if kwargs else method(worker, *args)
        if unique_reply_rank is not None and unique_reply_rank != worker.rank:
            value = None
        return _new_reply(Reply, (worker.rank, call_id, value, None))
    except BaseException as exc:  # noqa: BLE001 - the caller gets it, the worker lives on
        return error_reply(worker.rank, call_id, exc)


def error_reply(rank: int, call_id: int, exc: BaseException) -> Reply:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return Reply(rank, call_id, None, (type(exc).__qualname__, str(exc), tb))


# A reply whose value is None with no error, which every rank but one sends for
# a call with unique_reply_rank, travels as a marker, the rank and the call id:
# no pickling on either side.
_NONE_REPLY = struct.Struct("<cqq")
_NONE_MARK = b"N"
_NONE_MARK_BYTE = _NONE_MARK[0]


# Any other reply: a marker, the rank and the call id, then the pickled value
# and error, so that a value the caller cannot unpickle (a class it cannot
# import) still answers the right call, with an error.
_REPLY = struct.Struct("<cqq")
_REPLY_MARK = b"R"


def encode_reply(reply: Reply) -> bytes:
    """Pickle a reply; an unpicklable result becomes an error reply (C20)."""
    rank, call_id, value, error = reply
    if value is None and error is None:
        return _NONE_REPLY.pack(_NONE_MARK, rank, call_id)
    try:
        body = pickle.dumps((value, error), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001
        err = RuntimeError(f"result of type {type(value).__qualname__} could not be pickled: {exc}")
        body = pickle.dumps((None, error_reply(rank, call_id, err).error))
    return _REPLY.pack(_REPLY_MARK, rank, call_id) + body


def decode_reply(raw: bytes | bytearray) -> Reply:
    """The reply ``encode_reply`` wrote."""
    _, rank, call_id = _NONE_REPLY.unpack_from(raw)
    if raw[0] == _NONE_MARK_BYTE:
        return _new_reply(Reply, (rank, call_id, None, None))
    try:
        value, error = pickle.loads(memoryview(raw)[_REPLY.size :])
    except Exception as exc:  # noqa: BLE001 - e.g. a result class the caller cannot import
        err = RuntimeError(f"the result could not be unpickled in the caller: {exc!r}")
        return error_reply(rank, call_id, err)
    return _new_reply(Reply, (rank, call_id, value, error))


class StoreFile:
    """The file store of the process group, as a memfd: a file with no name, so a
    SIGKILLed caller leaves nothing in the file system (C13). A worker reaches it
    as ``/proc/self/fd/<fd>`` (torch's FileStore opens its path on every use).
    Pickled (spawn, forkserver) as a duplicate of the descriptor, as a
    ``Connection`` is; a forked worker inherits it at the same number."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @property
    def path(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    def __reduce__(self) -> tuple[Any, ...]:
        from multiprocessing.reduction import DupFd  # type: ignore[attr-defined]

        return _rebuild_store_file, (DupFd(self.fd),)


def _rebuild_store_file(dup: Any) -> StoreFile:
    return StoreFile(dup.detach())


def die_with_parent(expected_parent: int | None, death_fd: int, by_kernel: bool) -> None:
    """With ``by_kernel``, have the kernel SIGKILL this process when its parent
    dies: no thread of ours needs to run for it, so it holds even in native
    code that keeps the GIL or ignores SIGTERM (C13). (The kernel watches the
    parent *thread*: the caller asks for it only where that thread lives as
    long as its process.) Then, for the race where the parent died before
    that: exit if the parent is no longer ``expected_parent`` (None: not
    known, as under a fork server) or the death pipe already says the caller
    is gone. Linux only; elsewhere the death pipe alone remains."""
    if by_kernel:
        signal_on_parent_death()  # where it cannot be armed, the death pipe's thread still ends the worker
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(0)
    probe = selectors.DefaultSelector()
    try:
        probe.register(death_fd, selectors.EVENT_READ)
        if probe.select(0):  # readable before anyone wrote: EOF, the caller is gone
            os._exit(0)
    finally:
        probe.close()


def _watch_parent(death_fd: int) -> None:
    # Blocks until the parent closes its end (shutdown) or dies (any way, even
    # SIGKILL): then end the process, whatever the main thread is doing.
    try:
        while os.read(death_fd, 1):
            pass
    finally:
        os._exit(0)


class _ReplyChannel:
    """This rank's reply ring; after each reply, a wake-up byte if the caller sleeps."""

    def __init__(self, ring: RingHandle, notify_fd: int) -> None:
        self._writer = RingWriter.attach(ring)
        self._notify_fd = notify_fd
        self._backoff = 0.0

    def send(self, reply: Reply) -> None:
        self._backoff = 0.0
        self._writer.write(encode_reply(reply), self._wait_for_space, self._notify)

    def _notify(self) -> None:
        # Yield first: the caller may share this core and wait for this reply.
        # The yield is also the fence of the handshake (harness.executors.mp):
        # the reply is visible before the caller's flag is read.
        os.sched_yield()
        if self._writer.reader_asleep(0):
            try:
                os.write(self._notify_fd, b"\0")
            except BlockingIOError:
                pass  # the pipe is full of wake-ups already: the caller will look

    def _wait_for_space(self) -> None:
        # The caller is not reading replies (it will, when it next waits). Sleep
        # with a growing backoff: this worker has nothing else to do meanwhile.
        self._backoff = min(0.01, self._backoff * 2 or 0.0002)
        time.sleep(self._backoff)

    def close(self) -> None:
        self._writer.close()


def worker_main(
    spec: WorkerSpec,
    death_r: Connection,
    wake_r: Connection,
    notify_w: Connection,
    close_fds: list[int],
    store: StoreFile | None = None,
    expected_parent: int | None = None,
    parent_death_signal: bool = False,
) -> None:
    """Entry point of a worker process. ``close_fds``: the caller's pipe ends a
    forked child inherited and must not keep open; ``store``: the file store,
    when ``spec.store_path`` is empty; ``expected_parent``: the pid the worker's
    parent must have (None where it is not known); ``parent_death_signal``:
    whether the kernel may end it with its parent (``die_with_parent``)."""
    die_with_parent(expected_parent, death_r.fileno(), parent_death_signal)
    for fd in close_fds:
        os.close(fd)
    threading.Thread(target=_watch_parent, args=(death_r.fileno(),), name="harness-parent-watch", daemon=True).start()
    os.environ.update(spec.env)
    register_stacks_from_env()  # a hung test's stacks include this worker's
    os.set_blocking(notify_w.fileno(), False)
    replies = _ReplyChannel(spec.reply_ring, notify_w.fileno())
    try:
        reader = RingReader(spec.ring, spec.rank)
        store_path = spec.store_path or (store.path if store is not None else "")
        init_distributed(spec.rank, spec.world_size, spec.device, spec.dist_backend, store_path, spec.init_timeout_s)
        worker = Worker(spec.rank, spec.world_size, spec.device)
    except BaseException as exc:  # noqa: BLE001
        replies.send(error_reply(spec.rank, READY_CALL_ID, exc))
        return
    replies.send(Reply(spec.rank, READY_CALL_ID, os.getpid()))
    try:
        _serve(worker, reader, wake_r.fileno(), replies, spec.spin_s)
    finally:
        reader.close()
        replies.close()
        _destroy_process_group()
    _exit_now()


def _exit_now() -> None:
    """End the worker without tearing down its interpreter: a spawned worker
    would otherwise spend a third of a second unloading torch, and the caller's
    shutdown() waits for it. (Forked workers end this way already.)"""
    import multiprocessing.util

    multiprocessing.util._exit_function()  # type: ignore[attr-defined]  # what multiprocessing runs at exit
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(0)


def _serve(worker: Worker, reader: RingReader, wake_r: int, replies: _ReplyChannel, spin_s: float) -> None:
    os.set_blocking(wake_r, False)
    # Not select.select: the fd keeps the caller's number, which may exceed 1023.
    waiter = selectors.DefaultSelector()
    waiter.register(wake_r, selectors.EVENT_READ)
    while True:
        raw = reader.poll()
        if raw is None and spin_s > 0:
            # Waking from a blocked read costs tens of microseconds on a loaded
            # machine; right after a call the next one is likely close, so look
            # at the ring for a short while first, yielding the core each time.
            end = time.perf_counter() + spin_s
            while raw is None and time.perf_counter() < end:
                os.sched_yield()
                raw = reader.poll()
        if raw is None:
            # Raise the flag, drain the wake-ups, look once more, sleep: a request
            # published after that look finds the flag raised and writes a fresh
            # wake-up byte, so select cannot miss it.
            reader.set_asleep(True)
            drain(wake_r)  # a syscall: the fence between the flag and the look
            raw = reader.poll()
            if raw is None:
                waiter.select()
            reader.set_asleep(False)
            if raw is None:
                continue
        call_id, body = decode_request(raw)
        if call_id == SHUTDOWN_CALL_ID:
            return
        try:
            request = pickle.loads(body)  # run_call takes the plain tuple a Request pickles as
        except BaseException as exc:  # noqa: BLE001
            # e.g. a callable whose module this worker cannot import: answer the call.
            replies.send(error_reply(worker.rank, call_id, exc))
            continue
        del raw, body
        replies.send(run_call(worker, call_id, request))


def drain(fd: int) -> None:
    """Read a non-blocking wake-up pipe empty."""
    try:
        while os.read(fd, 65536):
            pass
    except BlockingIOError:
        pass


def _destroy_process_group() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - best effort on the way out
        pass
