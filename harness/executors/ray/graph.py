"""The `ray-graph` backend's executor: the rank actors of `ray`, driven through
a Ray Compiled Graph, as vLLM's compiled-graph Ray executor drives its workers
(``RayDistributedExecutor``, what vLLM 0.32.0 runs with
``VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0``; vLLM 0.34.0 has it no more). Kept to
show what that design costs:
its idle ranks spin in Ray's channel read (C25).

Data flow::

    caller thread ─ collective_rpc ─► pickle the call once ─► backlog (FIFO, in the caller)
         ▲                                   │ one execution at a time: the next call goes to the
         │                                   ▼ writer thread once the previous one's output was read
         │      graph input channel (shared memory): call id + body, a body over 64 KiB by
         │                                   │ object-store reference
         │                                   ▼
         │      rank actors 0 … N-1, each in its graph loop: step(msg) runs the call and
         │      returns its encoded reply (over 64 KiB: kept in the actor's object store,
         │                                   │ the reference travels)
         │                                   ▼ an output channel per rank
         └─ FutureQueue, drained inside result() on the caller's thread: timed reads
            of the output channels, rank by rank, in short slices (so shutdown and
            deaths are seen); each read spins 2 ms, then polls after sleeps

    monitor thread (``ray.executor``): pidfds of the actors; on a death it fails
    every pending call and runs the failure callbacks, once. Ray's own graph
    monitor thread waits on the actors' graph loops and tears the graph down
    when one fails.

Why the graph is driven so: what Ray 2.60's compiled graphs do, found by
experiment.

- The graph's input takes a new execution only once every rank has let go of
  the previous one, which a rank does when it reads the next; a write that
  cannot proceed waits up to ``submit_timeout`` and then fails, leaving the
  graph unusable. So one execution is in the graph at a time, written after
  the previous output was read, when every rank is normally waiting on its
  input; calls beyond it wait in the caller's backlog (C5's hundreds in
  flight). A rank stopped just after its reply (SIGSTOP) still holds the
  input: the write then waits, so writes happen on a writer thread of their
  own, with no submit timeout, and the caller's waits end at their timeouts.
- Ray's own read of the graph's output (``CompiledDAGRef.get``) reads every
  output channel, and when its timeout expires part-way it drops what it had
  read; it also marks the reference read before it reads, so a timeout loses
  the output for good. So the caller reads the output channels itself, rank by
  rank, keeping each reply as it comes; a timed-out read of one channel takes
  nothing, and the next read goes on from there.
- A read that times out while a channel grows for a larger message leaves the
  channel stuck; so no message is larger than the channels' buffer: large
  bodies and replies go by object-store reference.
- A ``CompiledDAGRef`` dropped unread reads (and may wait) in its ``__del__``;
  the executor marks its references read as it makes them, and tells the graph
  of each execution it read (``_max_finished_execution_index``).
- Ray's read of a channel spins (``sched_yield``) until it reads or times
  out: over a 3 s call the caller burnt 97 % of a core, which on 2 CPUs the
  ranks then lacked. So the caller lets it spin 2 ms (an empty call's reply at
  world size 4), then looks again after sleeps of 0.1 ms doubling to 2 ms:
  10.6 % of a core over the same call, an empty call's median unchanged
  (``tests/perf/scripts/ray_caller_wait.py``). The ranks' reads of the input are Ray's
  own loop and spin while the executor is idle (``harness bench``'s idle CPU
  of the workers).
- Ray's raylet makes a pair of named semaphores in ``/dev/shm`` for every
  channel and removes them only when the driver disconnects; the executor
  removes its graph's at shutdown.

It runs on one node only. A channel's semaphores are named files in the ``/dev/shm``
of the raylet that makes them, opened by name from every process on the
channel. Inside a test the caller runs in the simulated nodes' world, whose
``/dev/shm`` is not its node's: there a channel cannot work as it does on a
real cluster, and the graph across nodes is not offered (the same holds for a
test's private ``/dev/shm``, which the suite does not give a backend with a
run-wide session).

Shutdown tears the graph down before the actors go; with an execution still in
flight (a rank may be hung in native code) the actors are killed first, so the
teardown's waits end at once.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from typing import Any

import ray
from ray.exceptions import RayChannelError, RayChannelTimeoutError

from harness.contract import ExecutorConfig, ExecutorShutdownError, WorkerInitError
from harness.executors._group import GroupExecutor
from harness.executors.futures import PendingCall, Reply
from harness.executors.mp.worker import decode_reply, error_reply
from harness.executors.ray.executor import _EXIT_S, _TEARDOWN_S, _Group, _RankActor, _remaining, _wait_readable
from harness.system import leaks

__all__ = ["RayGraphExecutor"]

# Bodies and replies above this travel by object-store reference, so that no
# message outgrows a channel's buffer.
_INLINE_LIMIT = 64 * 1024
# Room in a channel for a message of the inline limit and its framing.
_FRAME = 4 * 1024
# How long one read of the output channel waits before looking at the executor's state again.
_READ_SLICE_S = 0.25
# How long a large reply may take to come from a live rank's object store.
_FETCH_S = 60.0
# After the graph breaks, how long to look for the rank whose death broke it.
_DEATH_GRACE_S = 5.0

_CALL_ID_BYTES = 8
# How long a write may wait for the ranks to take the previous input (Ray's
# default, 10 s, then fails the graph): a rank may be stopped as long as it
# likes; the writer thread waits, the caller's timeouts do not.
_SUBMIT_S = 365 * 24 * 3600
_SEMAPHORE_PREFIXES = (leaks.SEMAPHORE_PREFIX + "hdr", leaks.SEMAPHORE_PREFIX + "obj")
# Ray's read of a channel spins (sched_yield) until its timeout. The caller lets
# it spin this long, which an empty call's reply at world size 4 takes on a
# quiet machine, then looks again after sleeps that double up to the cap: a
# long call costs the caller a few per cent of a core, not a whole one.
_SPIN_S = 0.002
_POLL_FIRST_S = 0.0001
_POLL_CAP_S = 0.002


class _GraphRankActor(_RankActor):
    """One rank, run by its graph loop: ``step`` for every call."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._held: list[Any] = []  # the last call's large reply, until the next call

    def step(self, msg: Any) -> Any:
        # One execution at a time: a new call means the caller has read the last
        # one's replies, large ones included.
        self._held.clear()
        if not msg:
            return b""  # the warm-up: channels opened
        if isinstance(msg, bytes):
            call_id = int.from_bytes(msg[:_CALL_ID_BYTES], "little")
            body = msg[_CALL_ID_BYTES:]
        else:
            call_id, (ref,) = msg
            body = ray.get(ref)
        raw = self.execute(call_id, body)
        if len(raw) <= _INLINE_LIMIT:
            return raw
        ref = ray.put(raw)
        self._held.append(ref)
        return (call_id, [ref])


_RemoteGraphActor = ray.remote(_GraphRankActor)


class _GraphGroup(_Group):
    """A ``ray.executor._Group`` whose calls go through a compiled graph."""

    actor_class = _RemoteGraphActor

    def __init__(self, config: ExecutorConfig, address: str | None) -> None:
        super().__init__(config, address)
        self.dag: Any = None
        self.channels: list[Any] = []  # the graph's output channels, one per rank
        self.semaphores: set[str] = set()  # names in /dev/shm of the channels' semaphores
        self.backlog: deque[tuple[PendingCall, bytes]] = deque()
        # The execution in flight: its call id, and the replies read so far by rank.
        self.current: tuple[int, dict[int, Any]] | None = None
        # What ended the graph, raised by every later receive.
        self.broken: BaseException | None = None
        # The writer thread's: the call it is to write, the object-store
        # reference of a body too large for the channel (until its call is
        # read), and the error a write ended with.
        self._write_cv = threading.Condition()
        self._to_write: tuple[int, bytes] | None = None
        self.puts: dict[int, Any] = {}
        self.write_error: BaseException | None = None
        self.writer: threading.Thread | None = None

    # ---- start-up ---------------------------------------------------------

    def start(self) -> None:
        started = time.monotonic()
        super().start()
        from ray.dag import InputNode, MultiOutputNode

        buffer = max(1 << 20, _INLINE_LIMIT + _FRAME)
        mine_before = _mapped_semaphores([os.getpid()])
        try:
            with InputNode() as inp:
                output = MultiOutputNode([actor.step.bind(inp) for actor in self.actors])
            self.dag = output.experimental_compile(
                _buffer_size_bytes=buffer, _max_inflight_executions=1, _submit_timeout=_SUBMIT_S
            )
            self.channels = list(self.dag.dag_output_channels)
            self._warm_up(started + self.config.init_timeout_s)
        except Exception as exc:
            raise WorkerInitError(f"ray: could not compile the ranks' graph: {exc}") from exc
        # Ray's raylet makes a pair of named semaphores in /dev/shm for every
        # channel and removes them only when the driver disconnects: a caller
        # that stays connected (another executor, its own ray.init) would keep
        # every graph's. Ours, removed at shutdown: those our ranks map (the
        # input's), and those this process mapped for the graph (the outputs').
        ranks = [pid for pid, local in zip(self.pids, self.local, strict=True) if local and pid]
        self.semaphores = _mapped_semaphores(ranks) | (_mapped_semaphores([os.getpid()]) - mine_before)
        self.writer = threading.Thread(target=self._write_loop, name="harness-ray-graph-writer", daemon=True)
        self.writer.start()

    def _open_calls(self, deadline: float) -> None:
        """The graph carries the calls (compiled in ``start``), not ``ray.channels``."""

    def _stop_calls(self) -> None:
        # The graph is down: the ranks' actors take tasks again.
        refs = [a.teardown.remote(self.store_dir if r == 0 else None) for r, a in enumerate(self.actors)]
        ray.wait(refs, num_returns=len(refs), timeout=_TEARDOWN_S)

    def _warm_up(self, deadline: float) -> None:
        """One empty execution, so that every rank has opened its channels."""
        refs = self.dag.execute(b"")
        for ref in refs:
            ref._ray_get_called = True
        for rank, channel in enumerate(self.channels):
            try:
                channel.read(max(0.001, _remaining(deadline)))
            except RayChannelTimeoutError:
                raise WorkerInitError(
                    f"rank {rank}: its graph did not answer within init_timeout_s={self.config.init_timeout_s:g} s"
                ) from None
        self.dag._max_finished_execution_index += 1

    # ---- calls ------------------------------------------------------------

    def send(self, call: PendingCall, body: bytes) -> None:
        """Queue one registered call (under the queue lock); hand it to the
        writer at once if nothing is in flight."""
        if self.broken is not None or self.current is not None:
            self.backlog.append((call, body))
            return
        self._hand(call.call_id, body)

    def _hand(self, call_id: int, body: bytes) -> None:
        self.current = (call_id, {})
        with self._write_cv:
            self._to_write = (call_id, body)
            self._write_cv.notify()

    def _write_loop(self) -> None:
        """The writer thread: writes each call into the graph's input. A write
        waits until every rank has let go of the previous call's input, which a
        rank does only when it reads the next: a rank stopped just after
        replying (SIGSTOP, a debugger) holds it. So no write happens on the
        caller's thread, whose waits must end at their timeouts (C7)."""
        while True:
            with self._write_cv:
                while self._to_write is None and not self.closed:
                    self._write_cv.wait()
                item, self._to_write = self._to_write, None
                if self.closed or item is None:
                    return
            call_id, body = item
            try:
                if len(body) > _INLINE_LIMIT:
                    put = ray.put(body)
                    self.puts[call_id] = put
                    msg: Any = (call_id, [put])
                else:
                    msg = call_id.to_bytes(_CALL_ID_BYTES, "little") + body
                del body
                for ref in self.dag.execute(msg):
                    # Read channel by channel, never through the reference: one
                    # dropped unread would read (and may wait) in its __del__.
                    ref._ray_get_called = True
            except BaseException as exc:  # noqa: BLE001 - the caller raises it (the graph is unusable)
                self.write_error = exc
                return

    def _write_next(self) -> None:
        if self.backlog:
            call, body = self.backlog.popleft()
            self._hand(call.call_id, body)

    def _receive(self, timeout: float | None) -> list[Reply]:
        if self.closed:
            raise ExecutorShutdownError("executor was shut down")
        if self.failure.error is not None:
            raise self.failure.error
        if self.broken is not None:
            raise self.broken
        if self.write_error is not None:
            self.broken = self._graph_broken(self.write_error)
            raise self.broken
        if self.current is None:
            # Nothing in flight (the queue has only settled calls): wait for shutdown.
            _wait_readable(self._stop_r, timeout)
            return []
        call_id, got = self.current
        slice_s = _READ_SLICE_S if timeout is None else min(timeout, _READ_SLICE_S)
        end = time.monotonic() + slice_s
        try:
            for rank, channel in enumerate(self.channels):
                if rank not in got:
                    # Rank by rank, keeping what was read: a timed-out read of
                    # several channels at once would drop the ones it had read.
                    got[rank] = _read(channel, end)
        except RayChannelTimeoutError:
            if self.closed:
                raise ExecutorShutdownError("executor was shut down while the call was waiting") from None
            if self.failure.error is not None:
                raise self.failure.error from None
            return []
        except RayChannelError as exc:
            raise self._graph_broken(exc) from None
        # Every output read outside the graph's own bookkeeping: tell it, so it
        # takes the next execution.
        self.dag._max_finished_execution_index += 1
        gathered = [got[rank] for rank in range(len(self.channels))]
        self.current = None
        self.puts.pop(call_id, None)
        replies = [self._reply(rank, call_id, item) for rank, item in enumerate(gathered)]
        self._write_next()
        return replies

    def _reply(self, rank: int, call_id: int, item: Any) -> Reply:
        if isinstance(item, BaseException):  # a RayTaskError: the graph's task failed outside the call
            return error_reply(rank, call_id, item)
        try:
            if not isinstance(item, bytes):
                _, (ref,) = item
                item = ray.get(ref, timeout=_FETCH_S)
            return decode_reply(item)
        except Exception as exc:  # noqa: BLE001 - e.g. a result class the caller cannot import
            err = RuntimeError(f"the result could not be unpickled in the caller: {exc!r}")
            return error_reply(rank, call_id, err)

    def _graph_broken(self, exc: BaseException) -> BaseException:
        """The error for a graph Ray tore down: a rank's death, when one died."""
        deadline = time.monotonic() + _DEATH_GRACE_S
        while True:
            if self.failure.error is not None:
                return self.failure.error
            rank = self.dead_rank()
            if rank is not None:
                return self.fail(rank)
            if _remaining(deadline) <= 0:
                return RuntimeError(f"ray: the ranks' compiled graph was torn down, so no call can run: {exc}")
            time.sleep(0.05)

    # ---- shutdown ---------------------------------------------------------

    def _stop_actors(self) -> None:
        dag, self.dag = self.dag, None
        if dag is not None and ray.is_initialized():
            if self.current is not None or self.failure.error is not None:
                # A rank may be hung in the call: the teardown would wait on it.
                for actor in self.actors:
                    with contextlib.suppress(Exception):
                        ray.kill(actor, no_restart=True)
            with contextlib.suppress(Exception):
                dag.teardown()
        with self._write_cv:
            self._write_cv.notify()  # closed: the writer ends, or its write fails with the graph
        if self.writer is not None and self.writer is not threading.current_thread():
            self.writer.join(_EXIT_S)
        self.current = None
        self.backlog.clear()
        self.puts.clear()
        super()._stop_actors()
        # The ranks have exited and the graph is down: what no other process maps
        # now is nobody's (this one keeps its mappings until Ray disconnects).
        for name in sorted(self.semaphores):
            if not leaks.mapped_outside(name, {os.getpid()}):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(leaks.SHM_DIR, name))
        self.semaphores = set()


def _mapped_semaphores(pids: list[int]) -> set[str]:
    """The names of Ray's channel semaphores (``/dev/shm/sem.hdr<raylet pid>-<n>``
    and ``sem.obj…``) that these processes map."""
    return {name for name in leaks.shm_mapped_by(pids) if name.startswith(_SEMAPHORE_PREFIXES)}


class RayGraphExecutor(GroupExecutor):
    """Workers as Ray actors driven through a compiled graph. See the module
    docstring for the data flow.

    ``address``: a Ray cluster to connect to (default: ``RAY_ADDRESS``, else a
    local cluster started for this process)."""

    def __init__(self, config: ExecutorConfig, *, address: str | None = None) -> None:
        if config.nodes != 1:
            # See the module docstring: the suite's simulated nodes cannot give a channel what it needs.
            raise ValueError(f"ray-graph: runs on one node only, got nodes={config.nodes!r}")
        super().__init__(config, lambda: _GraphGroup(config, address))


def _read(channel: Any, end: float) -> Any:
    """Read ``channel`` by ``end`` (``time.monotonic()``), or raise
    ``RayChannelTimeoutError``: Ray's spinning read for the first
    :data:`_SPIN_S`, then a look at the channel after every sleep, each sleep
    twice the last up to :data:`_POLL_CAP_S`. Ray's read alone would hold a
    core of the caller's for as long as a call runs, which the ranks and every
    other process of the machine then lack (the founding incident of this
    project: a caller busy-waiting on its reply queue beside the scheduler)."""
    try:
        return channel.read(min(_SPIN_S, _remaining(end)))
    except RayChannelTimeoutError as exc:
        timed_out = exc
    pause = _POLL_FIRST_S
    while (left := _remaining(end)) > 0:
        time.sleep(min(pause, left))
        pause = min(pause * 2, _POLL_CAP_S)
        try:
            return channel.read(0)
        except RayChannelTimeoutError as exc:
            timed_out = exc
    raise timed_out
