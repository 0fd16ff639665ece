"""How the ``ray`` executor's calls and replies travel: the ``mp`` executor's
shared-memory rings to the ranks on the caller's node, a socket to each rank
on another node. Ray places the rank actors, starts them and reports their
deaths; it carries no call.

Data flow::

    caller ─ send ─┬─► request ring (shm, one write per call) ─► local ranks ─┐
                   │   wake-up pipe per rank, as mp (harness.executors.mp)    │ reply ring per rank
                   └─► a frame on each remote rank's socket ─► remote ranks ─┐ │ + notify pipe
                                                                             │ │
    caller ◄─ collect: reply rings, then the sockets' frames ◄──────────────┴─┘
              (spin 1 ms, then sleep in select on the notify pipe, the
              sockets, the local ranks' pidfds and the stop pipe)

A local rank reaches the caller's pipes through ``/proc/<caller pid>/fd/<n>``:
Ray starts the actor processes, so they inherit nothing from the caller. The
death pipe's read end goes the same way: when the caller closes its write end
(shutdown) or dies, every local rank ends at once (C9, C13).

A remote rank connects to a listener the caller binds to its own Ray node
address (never to every interface), proves itself with a token that came with
its actor's arguments, and names its rank; on one node nothing listens. The
caller's end of a socket closing (shutdown, death) ends the rank.

Frames on a socket: an 8-byte little-endian length, then the payload a ring
message would carry (``mp.worker``'s request or reply encoding).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import secrets
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.contract import ExecutorError, RPCTimeoutError, WorkerInitError
from harness.executors.futures import PendingCall, Reply
from harness.executors.mp.shm import RingHandle, RingReader, RingWriter
from harness.executors.mp.worker import (
    SHUTDOWN_CALL_ID,
    Worker,
    _ReplyChannel,
    _serve,
    _watch_parent,
    decode_reply,
    decode_request,
    drain,
    encode_reply,
    encode_request,
    error_reply,
    request_header,
    run_call,
)

__all__ = ["CallerChannels", "LocalPlan", "RankChannel", "RemotePlan"]

_LENGTH = struct.Struct("<Q")
_HELLO = struct.Struct("<32sq")  # token, rank
# Slots of each local rank's reply ring (each of the request ring's slot size), as mp.
_REPLY_SLOTS = 8
# How long one wait blocks where remote ranks take part: a rank whose node is
# gone may leave its socket open (no FIN), and only the monitor's look at
# Ray's actor table says it died.
_REMOTE_SLICE_S = 0.25
# While a socket is full, how long one wait for its rank to read may block
# before the replies are taken meanwhile.
_FULL_WAIT_S = 0.002


@dataclass(frozen=True)
class LocalPlan:
    """What a rank on the caller's node needs to attach to its channels."""

    caller_pid: int
    ring: RingHandle
    reader: int
    reply_ring: RingHandle
    wake_fd: int  # the caller's read end of this rank's wake-up pipe
    notify_fd: int  # the caller's write end of the notify pipe
    death_fd: int  # the caller's read end of the death pipe
    spin_s: float


@dataclass(frozen=True)
class RemotePlan:
    """What a rank on another node needs to reach the caller."""

    address: str
    port: int
    token: bytes


class _Timeout(Exception):
    pass


class CallerChannels:
    """The caller's end of every rank's channel. ``local[r]``: whether rank r
    runs on the caller's node; ``address``: the caller's node address, where
    remote ranks connect."""

    def __init__(
        self,
        local: list[bool],
        address: str,
        *,
        ring_slots: int = 32,
        slot_size: int = 128 * 1024,
        spin_s: float = 0.001,
        worker_spin_s: float = 0.01,
    ) -> None:
        self.world_size = len(local)
        self.spin_s = spin_s
        self.local_ranks = [r for r, here in enumerate(local) if here]
        self.remote_ranks = [r for r, here in enumerate(local) if not here]
        self._worker_spin_s = worker_spin_s
        self._stop_r, self._stop_w = os.pipe()
        self.ring: RingWriter | None = None
        self.reply_owners: list[RingWriter] = []
        self.reply_readers: list[RingReader] = []
        self.wake_fds: list[int] = []  # write ends, by local index
        self._child_ends: list[int] = []  # ends the ranks open through /proc, closed once attached
        self.notify_r = self.death_w = -1
        self.listener: socket.socket | None = None
        self.token = secrets.token_bytes(32)
        self.sockets: dict[int, socket.socket] = {}  # remote rank -> its connection
        self._inbox: dict[int, bytearray] = {}
        self._rank_of_fd: dict[int, int] = {}
        self.pidfds: dict[int, int] = {}  # local rank -> pidfd, for the waits (owned by the group)
        self._address = address
        self.broken: BaseException | None = None
        self._selector: selectors.BaseSelector | None = None
        if self.local_ranks:
            self.ring = RingWriter(len(self.local_ranks), ring_slots, slot_size)
            for _ in self.local_ranks:
                owner = RingWriter(1, _REPLY_SLOTS, slot_size)
                self.reply_owners.append(owner)
                self.reply_readers.append(RingReader(owner.handle, 0))
                wake_r, wake_w = os.pipe()
                os.set_blocking(wake_w, False)
                self.wake_fds.append(wake_w)
                self._child_ends.append(wake_r)
            self.notify_r, notify_w = os.pipe()
            os.set_blocking(self.notify_r, False)
            death_r, self.death_w = os.pipe()
            self._child_ends += [notify_w, death_r]
            self._notify_w, self._death_r = notify_w, death_r
        if self.remote_ranks:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            self.listener = socket.socket(family, socket.SOCK_STREAM)
            self.listener.bind((address, 0))
            self.listener.listen(len(self.remote_ranks))

    # ---- start-up ---------------------------------------------------------

    def plan(self, rank: int) -> LocalPlan | RemotePlan:
        if rank in self.remote_ranks:
            assert self.listener is not None
            return RemotePlan(self._address, self.listener.getsockname()[1], self.token)
        assert self.ring is not None
        index = self.local_ranks.index(rank)
        return LocalPlan(
            caller_pid=os.getpid(),
            ring=self.ring.handle,
            reader=index,
            reply_ring=self.reply_owners[index].handle,
            wake_fd=self._child_ends[index],
            notify_fd=self._notify_w,
            death_fd=self._death_r,
            spin_s=self._worker_spin_s,
        )

    def attached(self, deadline: float) -> None:
        """Every rank has attached (its ``attach`` returned): take the remote
        ranks' connections, and let the rings' names and the ranks' pipe ends go,
        so that a SIGKILLed caller leaves nothing behind."""
        if self.listener is not None:
            self._accept(deadline)
            self.listener.close()
            self.listener = None
        if self.ring is not None:
            self.ring.unlink()
            for owner in self.reply_owners:
                owner.unlink()
        for fd in self._child_ends:
            os.close(fd)
        self._child_ends = []

    def _accept(self, deadline: float) -> None:
        assert self.listener is not None
        self.listener.settimeout(0.25)
        while len(self.sockets) < len(self.remote_ranks):
            if time.monotonic() >= deadline:
                missing = sorted(set(self.remote_ranks) - set(self.sockets))
                raise WorkerInitError(f"ranks {missing}: did not connect to the caller at {self._address}")
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                token, rank = _HELLO.unpack(_recv_exactly(conn, _HELLO.size))
            except (OSError, ConnectionError, struct.error):
                conn.close()
                continue
            if not secrets.compare_digest(token, self.token) or rank not in self.remote_ranks or rank in self.sockets:
                conn.close()  # not one of ours
                continue
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sockets[rank] = conn
            self._inbox[rank] = bytearray()
            self._rank_of_fd[conn.fileno()] = rank

    # ---- calls ------------------------------------------------------------

    def send(self, call: PendingCall, body: bytes, pump: Callable[[float], None]) -> None:
        """Write one call to every rank; ``pump`` takes replies for a while
        (the queue's), when a ring or a socket is full."""
        if self.broken is not None:
            raise self.broken
        header = request_header(call.call_id)
        started = False

        def wait_for_space() -> None:
            if call.deadline is not None and time.monotonic() >= call.deadline:
                raise _Timeout
            pump(_FULL_WAIT_S)

        try:
            if self.ring is not None:
                before = self.ring.chunks_written
                try:
                    self.ring.write(body, wait_for_space, self._wake, prefix=header)
                finally:
                    started = self.ring.chunks_written != before
            if self.sockets:
                frame = _LENGTH.pack(len(header) + len(body)) + header
                for rank in self.remote_ranks:
                    started = True
                    self._send_frame(rank, (frame, body), wait_for_space)
        except BaseException as exc:
            if not started:
                if isinstance(exc, _Timeout):
                    raise RPCTimeoutError(
                        f"ranks {self._lagging()}: collective_rpc({call.method!r}) timed out after "
                        f"{call.timeout:g} s waiting to send (workers not reading)"
                    ) from None
                raise
            # Part of a request went out: the next one would be read as its rest.
            self.broken = ExecutorError(
                f"collective_rpc({call.method!r}) was interrupted half-way through sending a request "
                f"({type(exc).__name__}); the executor cannot be used any more"
            )
            if isinstance(exc, _Timeout):
                raise RPCTimeoutError(
                    f"ranks {self._lagging()}: collective_rpc({call.method!r}) timed out after {call.timeout:g} s "
                    "half-way through sending its request (workers not reading); the executor cannot be used any more"
                ) from exc
            raise self.broken from exc

    def _lagging(self) -> list[int]:
        lagging = [self.local_ranks[i] for i in self.ring.lagging_readers()] if self.ring is not None else []
        return lagging + self.remote_ranks

    def _wake(self) -> None:
        # As mp's wake(): yield the core (the handshake's fence), then wake sleepers.
        os.sched_yield()
        assert self.ring is not None
        for index, fd in enumerate(self.wake_fds):
            if self.ring.reader_asleep(index):
                with contextlib.suppress(BlockingIOError, BrokenPipeError):
                    os.write(fd, b"\0")

    def _send_frame(self, rank: int, parts: tuple[bytes, bytes], wait_for_space: Callable[[], None]) -> None:
        sock = self.sockets[rank]
        for part in parts:
            view = memoryview(part)
            while view:
                try:
                    sent = sock.send(view)
                except BlockingIOError:
                    # The rank is not reading: take replies meanwhile (it may be
                    # blocked writing one), then look again.
                    self._read_sockets()
                    wait_for_space()
                    continue
                view = view[sent:]

    def shutdown_workers(self) -> None:
        """Ask every rank to stop serving (best effort: the death pipe and the
        sockets' closing end the ranks that do not)."""
        request = encode_request(SHUTDOWN_CALL_ID, b"")
        if self.ring is not None and self.broken is None:
            with contextlib.suppress(Exception):
                if self.ring.has_space():
                    self.ring.write(request, _no_wait, self._wake)
        for sock in self.sockets.values():
            with contextlib.suppress(OSError):
                sock.send(_LENGTH.pack(len(request)) + request)

    # ---- replies ----------------------------------------------------------

    def collect(self, timeout: float | None) -> tuple[list[Reply], list[int], bool]:
        """Replies that arrive within ``timeout`` s, the ranks seen dead meanwhile,
        and whether the stop pipe woke the wait."""
        replies = self._poll()
        if replies:
            return replies, [], False
        if timeout == 0:
            # A look that does not wait (future.done()) still reads what the
            # remote ranks' sockets hold: their frames reach the inboxes only here.
            dead = self._read_sockets() if self.sockets else []
            return self._poll(), dead, False
        if self.spin_s > 0 and self.ring is not None:
            end = time.perf_counter() + (self.spin_s if timeout is None else min(self.spin_s, timeout))
            while time.perf_counter() < end:
                os.sched_yield()
                replies = self._poll()
                if replies:
                    return replies, [], False
        if self.remote_ranks:
            timeout = _REMOTE_SLICE_S if timeout is None else min(timeout, _REMOTE_SLICE_S)
        for reader in self.reply_readers:
            reader.set_asleep(True)
        try:
            if self.notify_r >= 0:
                drain(self.notify_r)  # a syscall: the fence between the flags and the look
            replies = self._poll()
            if replies:
                return replies, [], False
            events = [key.data for key, _ in self._waits().select(timeout)]
        finally:
            for reader in self.reply_readers:
                reader.set_asleep(False)
        dead = [rank for kind, rank in events if kind == "exit"]
        dead += self._read_sockets()
        # Replies sent before a death are delivered first.
        return self._poll(), dead, ("stop", -1) in events

    def _waits(self) -> selectors.BaseSelector:
        """What a wait for replies sleeps on, registered once (a selector per wait
        would cost a few system calls on every call that sleeps)."""
        if self._selector is None:
            sel = self._selector = selectors.DefaultSelector()
            sel.register(self._stop_r, selectors.EVENT_READ, ("stop", -1))
            if self.notify_r >= 0:
                sel.register(self.notify_r, selectors.EVENT_READ, ("reply", -1))
            for rank, sock in self.sockets.items():
                sel.register(sock, selectors.EVENT_READ, ("socket", rank))
            for rank, fd in self.pidfds.items():
                sel.register(fd, selectors.EVENT_READ, ("exit", rank))
        return self._selector

    def _poll(self) -> list[Reply]:
        # One reply per local rank at most (as mp), every whole frame of the sockets.
        replies = []
        for reader in self.reply_readers:
            raw = reader.poll()
            if raw is not None:
                replies.append(decode_reply(raw))
        for inbox in self._inbox.values():
            while len(inbox) >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(inbox)
                if len(inbox) < _LENGTH.size + length:
                    break
                raw = bytes(inbox[_LENGTH.size : _LENGTH.size + length])
                del inbox[: _LENGTH.size + length]
                replies.append(decode_reply(raw))
        return replies

    def _read_sockets(self) -> list[int]:
        """Read what the sockets hold into their inboxes; the ranks whose
        connection closed (their process ended)."""
        closed = []
        for rank, sock in self.sockets.items():
            while True:
                try:
                    chunk = sock.recv(1 << 20)
                except BlockingIOError:
                    break
                except OSError:
                    chunk = b""
                if not chunk:
                    closed.append(rank)
                    break
                self._inbox[rank] += chunk
        return closed

    def stop(self) -> None:
        """Wake a wait blocked in ``collect`` (shutdown from another thread)."""
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")

    def close_death_pipe(self) -> None:
        """Every local rank still alive exits now, even mid-call."""
        if self.death_w >= 0:
            os.close(self.death_w)
            self.death_w = -1
        for sock in self.sockets.values():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        self.close_death_pipe()
        for sock in self.sockets.values():
            sock.close()
        self.sockets = {}
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        for fd in [*self.wake_fds, *self._child_ends, self.notify_r, self._stop_r, self._stop_w]:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.wake_fds, self._child_ends, self.notify_r = [], [], -1
        for reader in self.reply_readers:
            reader.close()
        for owner in self.reply_owners:
            owner.close()
        self.reply_readers, self.reply_owners = [], []
        if self.ring is not None:
            self.ring.close()
            self.ring = None


def _no_wait() -> None:
    raise ExecutorError("request ring full")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


# ---- the rank's end -------------------------------------------------------------


class RankChannel:
    """A rank's end of its channel, attached in the actor, served by ``serve``."""

    def __init__(self, rank: int, plan: LocalPlan | RemotePlan, timeout_s: float) -> None:
        self.rank = rank
        self.plan = plan
        self.sock: socket.socket | None = None
        if isinstance(plan, RemotePlan):
            self.sock = socket.create_connection((plan.address, plan.port), timeout=timeout_s)
            self.sock.settimeout(None)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.sendall(_HELLO.pack(plan.token, rank))
            return
        proc = f"/proc/{plan.caller_pid}/fd"
        self.wake_fd = os.open(f"{proc}/{plan.wake_fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.notify_fd = os.open(f"{proc}/{plan.notify_fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.death_fd = os.open(f"{proc}/{plan.death_fd}", os.O_RDONLY | os.O_CLOEXEC)
        with _untracked():
            self.reader = RingReader(plan.ring, plan.reader)
            self.replies = _ReplyChannel(plan.reply_ring, self.notify_fd)

    def serve(self, worker: Worker) -> None:
        """Run calls until the caller asks to stop; a caller gone ends the process."""
        if self.sock is not None:
            _serve_socket(worker, self.sock)
            return
        assert isinstance(self.plan, LocalPlan)
        threading.Thread(target=_watch_parent, args=(self.death_fd,), name="harness-caller-watch", daemon=True).start()
        try:
            _serve(worker, self.reader, self.wake_fd, self.replies, self.plan.spin_s)
        finally:
            self.reader.close()
            self.replies.close()


def _serve_socket(worker: Worker, sock: socket.socket) -> None:
    # Blocks in recv between calls: an idle rank burns nothing. EOF: the caller is gone.
    try:
        while True:
            (length,) = _LENGTH.unpack(_recv_exactly(sock, _LENGTH.size))
            call_id, body = decode_request(_recv_exactly(sock, length))
            if call_id == SHUTDOWN_CALL_ID:
                return
            try:
                request = pickle.loads(body)
            except BaseException as exc:  # noqa: BLE001 - e.g. a callable this rank cannot import
                reply = error_reply(worker.rank, call_id, exc)
            else:
                reply = run_call(worker, call_id, request)
            raw = encode_reply(reply)
            sock.sendall(_LENGTH.pack(len(raw)) + raw)
    except (ConnectionError, OSError):
        os._exit(0)


@contextlib.contextmanager
def _untracked():  # type: ignore[no-untyped-def]
    """Attach to the caller's segments without Python's resource tracker: it
    would start a process of its own in the actor and unlink the caller's
    segments when the actor exits."""
    from multiprocessing import resource_tracker

    register = resource_tracker.register
    resource_tracker.register = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        resource_tracker.register = register  # type: ignore[assignment]
