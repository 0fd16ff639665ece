"""Deliberately broken backends, one bug each, built on the reference executor.

The meta-tests run the conformance suite against each and expect the clause
the bug breaks to FAIL: a check no broken backend can fail proves nothing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import tempfile
import threading
import time
from typing import Any

from harness import ExecutorConfig
from harness.executors.mp import MultiprocExecutor


class _Wrapper:
    def __init__(self, config: ExecutorConfig) -> None:
        self.inner = MultiprocExecutor(config)
        self.world_size = config.world_size

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)

    def check_health(self) -> None:
        self.inner.check_health()

    def register_failure_callback(self, callback: Any) -> None:
        self.inner.register_failure_callback(callback)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _run(worker: Any, method: Any, args: Any, kwargs: Any) -> Any:
    """``method`` on ``worker``, as SPEC.md says a worker runs a call: a string
    names a method of the worker, a callable gets the worker first."""
    fn = getattr(worker, method) if isinstance(method, str) else functools.partial(method, worker)
    return fn(*args, **(kwargs or {}))


class ArrivalOrder(_Wrapper):
    """C1: results listed in the order ranks finished (highest rank first here)."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        return list(reversed(out)) if isinstance(out, list) and kw.get("unique_reply_rank") is None else out


class ListOfFutures(_Wrapper):
    """C4: non_block returns a list of per-rank futures."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if kw.get("non_block"):
            return [out] * self.world_size
        return out


class SwallowedException(_Wrapper):
    """C6: a worker's exception becomes a None result."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        try:
            return super().collective_rpc(*a, **kw)
        except Exception as exc:
            if "unique_reply_rank" in str(exc) or isinstance(exc, (ValueError, TypeError)):
                raise
            return [None] * self.world_size


class SpinningThread(_Wrapper):
    """C19: a background thread polls in a busy loop."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            pass

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join()
        super().shutdown()


class LeakedWorkers(_Wrapper):
    """C9: shutdown forgets to stop the workers."""

    def shutdown(self) -> None:
        self.inner._finalizer.detach()


class EagerCallbacks(_Wrapper):
    """C21: the callback is called with the result, not the future."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if not kw.get("non_block"):
            return out
        wrapped: concurrent.futures.Future[Any] = concurrent.futures.Future()
        out.add_done_callback(lambda f: wrapped.set_result(f.result()))
        original = wrapped.add_done_callback
        wrapped.add_done_callback = lambda fn: original(lambda f: fn(f.result()))  # type: ignore[method-assign]
        wrapped.result = lambda timeout=None: out.result(timeout)  # type: ignore[method-assign]
        return wrapped


def arrival_order(config: ExecutorConfig) -> ArrivalOrder:
    return ArrivalOrder(config)


def list_of_futures(config: ExecutorConfig) -> ListOfFutures:
    return ListOfFutures(config)


def swallowed_exception(config: ExecutorConfig) -> SwallowedException:
    return SwallowedException(config)


def spinning_thread(config: ExecutorConfig) -> SpinningThread:
    return SpinningThread(config)


def leaked_workers(config: ExecutorConfig) -> LeakedWorkers:
    return LeakedWorkers(config)


def eager_callbacks(config: ExecutorConfig) -> EagerCallbacks:
    return EagerCallbacks(config)


class IgnoresUniqueRank(_Wrapper):
    """C2: unique_reply_rank is ignored (no range check, a list comes back)."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, None)


class DropsKwargs(_Wrapper):
    """C3: kwargs never reach the worker."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        return self.inner.collective_rpc(method, timeout, args, None, non_block, unique_reply_rank)


class _OwnFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """Completes only when asked itself: earlier futures stay pending."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self._inner = inner

    def result(self, timeout: Any = None) -> Any:
        if not super().done():
            try:
                self.set_result(self._inner.result(timeout))
            except Exception as exc:  # noqa: BLE001
                self.set_exception(exc)
        return super().result(0)


class UnorderedFutures(_Wrapper):
    """C5: a future completes only when its own result() is asked for."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        return _OwnFuture(out) if kw.get("non_block") else out


class IgnoresTimeout(_Wrapper):
    """C7: the timeout is dropped."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        return self.inner.collective_rpc(method, None, args, kwargs, non_block, unique_reply_rank)


class CallbacksTwice(_Wrapper):
    """C8: every failure callback is registered, and so run, twice."""

    def register_failure_callback(self, callback: Any) -> None:
        self.inner.register_failure_callback(callback)
        self.inner.register_failure_callback(callback)


class LeakedThread(_Wrapper):
    """C10: every executor leaves a thread behind."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        threading.Thread(target=threading.Event().wait, name="leaked", daemon=True).start()


_FDS: list[int] = []


class LeakedDescriptor(_Wrapper):
    """C10: every executor leaves a pipe open (and nothing else)."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        _FDS.extend(os.pipe())


class ExitKeepsRunning(_Wrapper):
    """C11: leaving the with block does not shut down."""

    def __exit__(self, *exc: object) -> None:
        pass


_KEPT: list[Any] = []


class KeptAlive(_Wrapper):
    """C12: a registry keeps every executor's resources alive, so gc never stops them."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        _KEPT.append(self.inner)


def _shift_rank(worker: Any) -> None:
    import torch.distributed as dist

    worker.rank = (worker.rank + 1) % dist.get_world_size()


class ShiftedRanks(_Wrapper):
    """C14: worker.rank does not match the process-group rank."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        if config.world_size > 1:
            self.inner.collective_rpc(_shift_rank)


def _isolate_group(worker: Any, tmpdir: str) -> None:
    import os

    import torch.distributed as dist

    dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"file://{tmpdir}/alone-{os.getpid()}", rank=0, world_size=1)


class IsolatedGroups(_Wrapper):
    """C15/C16: each worker sits in a process group of its own: collectives see one rank."""

    def __init__(self, config: ExecutorConfig) -> None:
        import tempfile

        super().__init__(config)
        self._tmp = tempfile.TemporaryDirectory()
        self.inner.collective_rpc(_isolate_group, args=(self._tmp.name,))

    def shutdown(self) -> None:
        super().shutdown()
        self._tmp.cleanup()


class TruncatedPayloads(_Wrapper):
    """C17: arguments over 1 MiB are cut to 1 MiB."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        args = tuple(a[: 1 << 20] if isinstance(a, bytes) else a for a in args)
        return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)


_LIVE: list[Any] = []


def shared_singleton(config: ExecutorConfig) -> Any:
    """C18: a second executor is the first one again."""
    live = [ex for ex in _LIVE if not ex.inner._group.closed]
    if live:
        return live[0]
    ex = _Wrapper(config)
    _LIVE.append(ex)
    return ex


class PickleErrorInFuture(_Wrapper):
    """C20: an unpicklable argument fails the future, not the call."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        try:
            return super().collective_rpc(*a, **kw)
        except Exception as exc:
            if not kw.get("non_block"):
                raise
            fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
            fut.set_exception(exc)
            return fut


def ignores_init_failure(config: ExecutorConfig) -> _Wrapper:
    """C22: the start-up failure injection is ignored: the executor starts anyway."""
    import dataclasses
    import os

    os.environ.pop("HARNESS_FAIL_WORKER_INIT", None)
    env = {k: v for k, v in config.env.items() if k != "HARNESS_FAIL_WORKER_INIT"}
    return _Wrapper(dataclasses.replace(config, env=env))


class ListensEverywhere(_Wrapper):
    """C23: the caller listens on all interfaces."""

    def __init__(self, config: ExecutorConfig) -> None:
        import socket

        super().__init__(config)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("0.0.0.0", 0))
        self._sock.listen()

    def shutdown(self) -> None:
        self._sock.close()
        super().shutdown()


ignores_unique_rank = IgnoresUniqueRank
drops_kwargs = DropsKwargs
unordered_futures = UnorderedFutures
ignores_timeout = IgnoresTimeout
callbacks_twice = CallbacksTwice
leaked_thread = LeakedThread
leaked_descriptor = LeakedDescriptor
exit_keeps_running = ExitKeepsRunning
kept_alive = KeptAlive
shifted_ranks = ShiftedRanks
isolated_groups = IsolatedGroups
truncated_payloads = TruncatedPayloads
pickle_error_in_future = PickleErrorInFuture
listens_everywhere = ListensEverywhere


def _orphan_worker(conn: Any, rank: int) -> None:
    import time

    worker = type("Worker", (), {"rank": rank})()
    while True:
        try:
            if not conn.poll(0.5):
                continue
            method, args, kwargs = conn.recv()
        except (EOFError, OSError):
            time.sleep(0.5)  # the bug: a dead caller is taken for a quiet one
            continue
        conn.send(method(worker, *args, **(kwargs or {})))


class NoParentWatch:
    """C13: workers outlive a SIGKILLed caller (a pipe per worker, EOF ignored)."""

    def __init__(self, config: ExecutorConfig) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.world_size = config.world_size
        pipes = [ctx.Pipe() for _ in range(config.world_size)]
        self._conns = [a for a, _ in pipes]
        self._procs = [ctx.Process(target=_orphan_worker, args=(b, r)) for r, (_, b) in enumerate(pipes)]
        for p in self._procs:
            p.start()
        for _, b in pipes:
            b.close()

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        for c in self._conns:
            c.send((method, args, kwargs))
        out = [c.recv() for c in self._conns]
        return out if unique_reply_rank is None else out[unique_reply_rank]

    def check_health(self) -> None:
        pass

    def register_failure_callback(self, callback: Any) -> None:
        pass

    def shutdown(self) -> None:
        for p in self._procs:
            p.kill()
            p.join()
        for c in self._conns:
            c.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


no_parent_watch = NoParentWatch


# ---- C13 with calls in flight: workers that miss the caller's death while busy ----


def _pipe_worker(requests: Any, replies: Any, death: Any, rank: int, kept: Any, watch_for_life: bool) -> None:
    """A worker on pipes: requests in, replies out, the caller's death seen as
    EOF on ``death``. ``kept``: pipe ends it holds but has no use for."""
    import multiprocessing.connection

    worker = type("Worker", (), {"rank": rank})()
    reply_lock = threading.Lock()
    if watch_for_life:

        def watch() -> None:
            try:
                death.recv()
            except EOFError:
                pass
            with reply_lock:  # the bug: close the reply channel cleanly first, under its lock
                replies.close()
            os._exit(0)

        threading.Thread(target=watch, daemon=True).start()
    while True:
        ready = multiprocessing.connection.wait([requests, death])
        if death in ready and not watch_for_life:
            return  # the caller is gone: seen here, between calls, and only here
        if requests not in ready:
            continue
        method, args, kwargs = requests.recv()
        result = method(worker, *args, **(kwargs or {}))
        with reply_lock:
            replies.send(result)


class _LazyFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """Completed inside ``result()``, from the replies read in call order."""

    def __init__(self, owner: _PipeWorkers, unique_reply_rank: Any) -> None:
        super().__init__()
        self._owner = owner
        self._unique = unique_reply_rank

    def result(self, timeout: Any = None) -> Any:
        self._owner._complete_up_to(self)
        return super().result(timeout)


class _PipeWorkers:
    """Workers on pipes (spawned), replies read only when a future's result is
    asked for: under many calls whose results nobody reads, the reply pipes
    fill up and the workers block sending."""

    watch_for_life = False
    keep_reply_read_ends = False

    def __init__(self, config: ExecutorConfig) -> None:
        import collections
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.world_size = config.world_size
        self._pending: collections.deque[_LazyFuture] = collections.deque()
        self._lock = threading.Lock()
        death_r, self._death_w = ctx.Pipe(duplex=False)
        self._requests, self._replies, self._procs = [], [], []
        for rank in range(config.world_size):
            req_r, req_w = ctx.Pipe(duplex=False)
            rep_r, rep_w = ctx.Pipe(duplex=False)
            kept = rep_r if self.keep_reply_read_ends else None
            proc = ctx.Process(
                target=_pipe_worker, args=(req_r, rep_w, death_r, rank, kept, self.watch_for_life), daemon=True
            )
            proc.start()
            req_r.close()
            rep_w.close()
            self._requests.append(req_w)
            self._replies.append(rep_r)
            self._procs.append(proc)
        death_r.close()

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        future = _LazyFuture(self, unique_reply_rank)
        with self._lock:
            for conn in self._requests:
                conn.send((method, args, kwargs))
            self._pending.append(future)
        return future if non_block else future.result(timeout)

    def _complete_up_to(self, future: _LazyFuture) -> None:
        with self._lock:
            while not future.done() and self._pending:
                first = self._pending.popleft()
                out = [conn.recv() for conn in self._replies]
                first.set_result(out if first._unique is None else out[first._unique])

    def check_health(self) -> None:
        pass

    def register_failure_callback(self, callback: Any) -> None:
        pass

    def shutdown(self) -> None:
        self._death_w.close()
        for p in self._procs:
            p.kill()
            p.join()
        for conn in (*self._requests, *self._replies):
            conn.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class WatchesOnlyBetweenCalls(_PipeWorkers):
    """C13 with a call in flight: a worker that only watches for the caller's death
    between calls, in its main loop; a call that runs on (a sleep, a hang in
    native code) outlives a SIGKILLed caller. Idle, it exits at once."""


class BlockedOnAFullReplyChannel(_PipeWorkers):
    """C13 with the reply path backed up: a worker blocked sending on a full reply
    pipe never notices the caller's death. It holds the pipe's read end too (as a
    forked worker inherits it), so the write never fails; and its death watch,
    which runs for its whole life, first takes the reply channel's lock to close
    it cleanly, which the blocked send holds."""

    watch_for_life = True
    keep_reply_read_ends = True


watches_only_between_calls = WatchesOnlyBetweenCalls
blocked_on_a_full_reply_channel = BlockedOnAFullReplyChannel


# ---- worker death, hung workers, shutdown (C8-C12; branch faults-processes) -----------


class DeathSeenOnlyByCalls(_Wrapper):
    """C8: no monitor: the failure callbacks run only when a call or check_health()
    meets the death, so a worker dying while the executor is idle goes unnoticed."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._lock = threading.Lock()
        self._callbacks: list[Any] = []
        self._failed = False

    def register_failure_callback(self, callback: Any) -> None:
        self._callbacks.append(callback)

    def _seen(self, error: BaseException | None) -> None:
        from harness.contract import WorkerDiedError

        if not isinstance(error, WorkerDiedError):
            return
        with self._lock:
            callbacks, self._callbacks = ([] if self._failed else self._callbacks), []
            self._failed = True
        for callback in callbacks:
            callback()

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        try:
            out = super().collective_rpc(*a, **kw)
        except Exception as exc:
            self._seen(exc)
            raise
        if kw.get("non_block"):
            out.add_done_callback(lambda f: self._seen(f.exception()))
        return out

    def check_health(self) -> None:
        try:
            super().check_health()
        except Exception as exc:
            self._seen(exc)
            raise


class FirstCallbackOnly(_Wrapper):
    """C8: only the first registered failure callback is kept; later ones never run."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._registered = False

    def register_failure_callback(self, callback: Any) -> None:
        if not self._registered:
            self._registered = True
            super().register_failure_callback(callback)


def _rank_order_worker(conn: Any, rank: int, world_size: int, store_path: str) -> None:

    from harness.executors.mp.worker import Worker, init_distributed

    init_distributed(rank, world_size, "cpu", "gloo", store_path, 60.0)
    worker = Worker(rank, world_size, "cpu")
    conn.send(os.getpid())
    while True:
        try:
            request = conn.recv()
        except EOFError:
            os._exit(0)
        if request is None:
            os._exit(0)
        method, args, kwargs = request
        try:
            conn.send((True, _run(worker, method, args, kwargs)))
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            conn.send((False, f"rank {rank}: {exc!r}"))


class RankOrderReplies:
    """C8: replies are read rank by rank, each with a blocking read, and a dead rank
    is noticed only when its own pipe is read: a rank left blocked in a collective
    with the dead one holds the call for good. (Its callbacks run only when a call
    meets a death, too; only C8's collective check is run against it.)"""

    def __init__(self, config: ExecutorConfig) -> None:
        import multiprocessing
        import tempfile

        ctx = multiprocessing.get_context(config.start_method)
        self.world_size = config.world_size
        self._tmp = tempfile.mkdtemp(prefix="harness-broken-")
        self._callbacks: list[Any] = []
        self._closed = False
        pipes = [ctx.Pipe() for _ in range(config.world_size)]
        self._conns = [a for a, _ in pipes]
        store = f"{self._tmp}/store"
        self._procs = [
            ctx.Process(target=_rank_order_worker, args=(b, r, config.world_size, store), daemon=True)  # type: ignore[attr-defined]
            for r, (_, b) in enumerate(pipes)
        ]
        for p in self._procs:
            p.start()
        for _, b in pipes:
            b.close()
        for c in self._conns:
            c.recv()

    def _died(self, rank: int) -> RuntimeError:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()
        return RuntimeError(f"rank {rank}: worker died")

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        if self._closed:
            raise RuntimeError("the executor was shut down")
        for rank, c in enumerate(self._conns):
            try:
                c.send((method, args, kwargs))
            except OSError:
                raise self._died(rank) from None
        out = []
        for rank, c in enumerate(self._conns):
            try:
                ok, value = c.recv()
            except (EOFError, OSError):
                raise self._died(rank) from None
            if not ok:
                raise RuntimeError(value)
            out.append(value)
        return out if unique_reply_rank is None else out[unique_reply_rank]

    def check_health(self) -> None:
        for rank, p in enumerate(self._procs):
            if not p.is_alive():
                raise self._died(rank)

    def register_failure_callback(self, callback: Any) -> None:
        self._callbacks.append(callback)

    def shutdown(self) -> None:
        import shutil

        if self._closed:
            return
        self._closed = True
        for p in self._procs:
            p.kill()
            p.join()
        for c in self._conns:
            c.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class _TimeoutlessFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """Waits only without a timeout: ``result(timeout)`` and ``exception(timeout)`` are not implemented."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        inner.add_done_callback(self._copy)

    def _copy(self, inner: Any) -> None:
        error = inner.exception()
        if error is not None:
            self.set_exception(error)
        else:
            self.set_result(inner.result())

    def result(self, timeout: Any = None) -> Any:
        if timeout is not None:
            raise NotImplementedError("result(timeout) is not supported")
        return super().result()

    def exception(self, timeout: Any = None) -> Any:
        if timeout is not None:
            raise NotImplementedError("exception(timeout) is not supported")
        return super().exception()


class FuturesWithoutTimeout(_Wrapper):
    """C4 only: futures reject a timeout. Meets C8 otherwise: C8 must keep its own verdict (pass)."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        return _TimeoutlessFuture(out) if kw.get("non_block") else out


class ShutdownBySigterm(_Wrapper):
    """C9: shutdown() sends each worker SIGTERM and waits for it to exit, without a
    bound: a worker that ignores SIGTERM holds shutdown() for good."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._stopped = False

    def shutdown(self) -> None:
        if not self._stopped:
            self._stopped = True
            procs = [p for p in self.inner._group.processes if p.exitcode is None]  # type: ignore[attr-defined]
            for p in procs:
                p.terminate()
            for p in procs:
                p.join()
        super().shutdown()


death_seen_only_by_calls = DeathSeenOnlyByCalls
first_callback_only = FirstCallbackOnly
rank_order_replies = RankOrderReplies
futures_without_timeout = FuturesWithoutTimeout
shutdown_by_sigterm = ShutdownBySigterm


class HangsAfterShutdown(_Wrapper):
    """C9: a call after shutdown() blocks for good instead of raising."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._stopped = threading.Event()

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        if self._stopped.is_set():
            threading.Event().wait()
        return super().collective_rpc(*a, **kw)

    def shutdown(self) -> None:
        self._stopped.set()
        super().shutdown()


class HealthCheckHangsAfterADeath(_Wrapper):
    """C8: once a worker has died, check_health() blocks for good instead of raising."""

    def check_health(self) -> None:
        if self.inner._group.failure.error is not None:
            threading.Event().wait()
        super().check_health()


hangs_after_shutdown = HangsAfterShutdown
health_check_hangs_after_a_death = HealthCheckHangsAfterADeath


# ---- issue 9, clause sentences: results, futures, errors, bad input (C2, C4, C7, C15, C20-C22, C24) ----
# Some of these are conformant but unusual (marked "conformant"): the suite must pass them.

from harness.executors.mp.worker import Worker as _Worker  # noqa: E402 - this block's own import, kept with it


class _FutureProxy:
    """The executor's own future behind a facade; subclasses change one behaviour."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def result(self, timeout: Any = None) -> Any:
        return self.inner.result(timeout)

    def exception(self, timeout: Any = None) -> Any:
        return self.inner.exception(timeout)

    def done(self) -> bool:
        return bool(self.inner.done())

    def cancel(self) -> bool:
        return bool(self.inner.cancel())

    def cancelled(self) -> bool:
        return bool(self.inner.cancelled())

    def running(self) -> bool:
        return bool(self.inner.running())

    def add_done_callback(self, fn: Any) -> None:
        self.inner.add_done_callback(lambda _inner: fn(self))


class _ProxiedFutures(_Wrapper):
    proxy: type[_FutureProxy] = _FutureProxy

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        return self.proxy(out) if kw.get("non_block") else out


class _NoTimeoutFuture(_FutureProxy):
    def result(self, timeout: Any = None) -> Any:
        if timeout is not None:
            raise TypeError("result() takes no timeout here")
        return self.inner.result()

    def exception(self, timeout: Any = None) -> Any:
        if timeout is not None:
            raise TypeError("exception() takes no timeout here")
        return self.inner.exception()


class RejectsResultTimeout(_ProxiedFutures):
    """C4 alone: the future's result(timeout)/exception(timeout) raise TypeError
    (a third-party future without the timeout parameter). Every other clause holds."""

    proxy = _NoTimeoutFuture


class _NoneOnTimeoutFuture(_FutureProxy):
    def result(self, timeout: Any = None) -> Any:
        try:
            return self.inner.result(timeout)
        except TimeoutError:
            return None

    def exception(self, timeout: Any = None) -> Any:
        try:
            return self.inner.exception(timeout)
        except TimeoutError:
            return None


class TimeoutReturnsNone(_ProxiedFutures):
    """C4: result(timeout)/exception(timeout) on a pending future return None instead of raising."""

    proxy = _NoneOnTimeoutFuture


class _SlowTimeoutFuture(_FutureProxy):
    def result(self, timeout: Any = None) -> Any:
        return self.inner.result(None if timeout is None else timeout * 5)

    def exception(self, timeout: Any = None) -> Any:
        return self.inner.exception(None if timeout is None else timeout * 5)


class TimeoutWaitsTooLong(_ProxiedFutures):
    """C4: a wait with a timeout lasts five times the timeout."""

    proxy = _SlowTimeoutFuture


class _LostOnTimeoutFuture(_FutureProxy):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._lost = threading.Event()

    def _wait(self, name: str, timeout: Any) -> Any:
        if self._lost.is_set():
            if timeout is None:
                threading.Event().wait()  # the call was given up: nothing will complete it
            threading.Event().wait(timeout)
            raise TimeoutError
        try:
            return getattr(self.inner, name)(timeout)
        except TimeoutError:
            self._lost.set()
            raise

    def result(self, timeout: Any = None) -> Any:
        return self._wait("result", timeout)

    def exception(self, timeout: Any = None) -> Any:
        return self._wait("exception", timeout)

    def done(self) -> bool:
        return not self._lost.is_set() and bool(self.inner.done())


class TimeoutLosesTheFuture(_ProxiedFutures):
    """C4: once a wait with a timeout timed out, the future never completes."""

    proxy = _LostOnTimeoutFuture


class _PendingForeverFuture(_FutureProxy):
    def result(self, timeout: Any = None) -> Any:
        threading.Event().wait(timeout)
        raise TimeoutError

    def exception(self, timeout: Any = None) -> Any:
        return self.result(timeout)

    def done(self) -> bool:
        return False

    def add_done_callback(self, fn: Any) -> None:
        pass


class NeverCompletes(_ProxiedFutures):
    """C21 (and C5): a non-blocking call's future never completes; the suite must
    fail it within its own bounds, not wait out the harness timeout."""

    proxy = _PendingForeverFuture


class _DeafFuture(_FutureProxy):
    def add_done_callback(self, fn: Any) -> None:
        pass


class CallbacksNeverRun(_ProxiedFutures):
    """C21: done-callbacks are accepted and never run."""

    proxy = _DeafFuture


def _only_on(worker: Any, rank: int, method: Any, args: Any, kwargs: Any) -> Any:
    if worker.rank != rank:
        return None
    return _run(worker, method, args, kwargs)


class NarrowedToOneRank(_Wrapper):
    """C2: a unique_reply_rank=r call runs on rank r only."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        if isinstance(unique_reply_rank, int) and 0 <= unique_reply_rank < self.world_size:
            args, method, kwargs = (unique_reply_rank, method, args, kwargs), _only_on, None
        return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)


class SilentAfterTimeout(_Wrapper):
    """C7: after a timeout every later call fails, with an error that says nothing."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._timed_out = False

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        if self._timed_out:
            raise RuntimeError()
        try:
            return super().collective_rpc(*a, **kw)
        except TimeoutError:
            self._timed_out = True
            raise


_RENAMED_GLOO = "harness_gloo"


def _join_renamed_gloo(worker: Any, store_dir: str, world_size: int) -> None:
    import torch.distributed as dist

    def make(store: Any, rank: int, size: int, timeout: Any) -> Any:
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    if not hasattr(dist.Backend, _RENAMED_GLOO.upper()):
        dist.Backend.register_backend(_RENAMED_GLOO, make, devices=["cpu"])
    dist.destroy_process_group()
    dist.init_process_group(
        _RENAMED_GLOO, init_method=f"file://{store_dir}/store", rank=worker.rank, world_size=world_size
    )


class RenamedGloo(_Wrapper):
    """C15: the group runs on a backend of its own (gloo under another name), not config.dist_backend:
    on CPU the honest stand-in for a backend that always uses gloo, whatever the config says."""

    def __init__(self, config: ExecutorConfig) -> None:
        import tempfile

        super().__init__(config)
        self._tmp = tempfile.TemporaryDirectory()
        self.inner.collective_rpc(_join_renamed_gloo, args=(self._tmp.name, config.world_size))

    def shutdown(self) -> None:
        super().shutdown()
        self._tmp.cleanup()


def names_its_own_parameter(config: ExecutorConfig) -> _Wrapper:
    """Conformant (C20): a world size below one is a ValueError worded in the backend's own terms."""
    n = config.world_size
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return _Wrapper(config)


class ThreadCompletedFutures(_Wrapper):
    """Conformant (C21): futures complete on a thread of the executor's, in order,
    and their callbacks run there, a little after the call's replies are in."""

    def __init__(self, config: ExecutorConfig) -> None:
        import queue

        super().__init__(config)
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._completer = threading.Thread(target=self._complete, name="completer", daemon=True)
        self._completer.start()

    def _complete(self) -> None:
        import time

        while (job := self._jobs.get()) is not None:
            inner, outer = job
            try:
                value = inner.result()
            except BaseException as exc:  # noqa: BLE001 - the call's outcome
                time.sleep(0.05)
                outer.set_exception(exc)
            else:
                time.sleep(0.05)
                outer.set_result(value)

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if not kw.get("non_block"):
            return out
        outer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((out, outer))
        return outer

    def shutdown(self) -> None:
        super().shutdown()  # fails any pending call: the completer is not left waiting
        self._jobs.put(None)
        self._completer.join(30)


def refuses_injection_early(config: ExecutorConfig) -> _Wrapper:
    """C22: raises as soon as it sees the injection variable, without starting a worker."""
    value = config.env.get("HARNESS_FAIL_WORKER_INIT")
    if value is not None:
        raise RuntimeError(f"HARNESS_FAIL_WORKER_INIT={value}: refusing to start")
    return _Wrapper(config)


class SharedReplySlot(_Wrapper):
    """C24: a blocking call's result passes through one slot shared by every caller,
    unlocked: concurrent callers take each other's results.

    A caller reads the slot back only once another caller has written it (or
    after a second, where none does): the bug shows however slowly a loaded
    machine runs the callers, not only when two of them happen to meet."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._slot: Any = None
        self._written = threading.Condition()
        self._writes = 0

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if kw.get("non_block"):
            return out
        with self._written:
            self._slot = out
            self._writes += 1
            mine = self._writes
            self._written.notify_all()
            self._written.wait_for(lambda: self._writes != mine, timeout=1.0)
            return self._slot


def _freeze(worker: Any) -> None:
    worker.__class__ = _FrozenWorker


class _FrozenWorker(_Worker):
    """A worker object that refuses new attributes: SPEC.md promises only ``rank``."""

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} takes no new attributes (tried {name!r})")


class FrozenWorkers(_Wrapper):
    """Conformant (C2, C3): worker objects refuse new attributes; probes must keep their state elsewhere."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self.inner.collective_rpc(_freeze)


rejects_result_timeout = RejectsResultTimeout
timeout_returns_none = TimeoutReturnsNone
timeout_waits_too_long = TimeoutWaitsTooLong
timeout_loses_the_future = TimeoutLosesTheFuture
never_completes = NeverCompletes
callbacks_never_run = CallbacksNeverRun
narrowed_to_one_rank = NarrowedToOneRank
silent_after_timeout = SilentAfterTimeout
renamed_gloo = RenamedGloo
thread_completed_futures = ThreadCompletedFutures


class SecondCallerHangs(_Wrapper):
    """C24: a blocking call from a thread other than the first caller's waits for
    good (a lock taken and never given back): the suite's callers stall."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._first: int | None = None
        self._never = threading.Event()

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        me = threading.get_ident()
        if self._first is None:
            self._first = me
        if me != self._first and not kw.get("non_block"):
            self._never.wait()
        return super().collective_rpc(*a, **kw)


shared_reply_slot = SharedReplySlot
second_caller_hangs = SecondCallerHangs
frozen_workers = FrozenWorkers


def always_gloo(config: ExecutorConfig) -> _Wrapper:
    """C15 (GPU tier): the group runs on gloo whatever config.dist_backend says."""
    import dataclasses

    return _Wrapper(dataclasses.replace(config, dist_backend="gloo"))


# ---- processes the executor started (C9 leaks, C13, C23), C23 in a network namespace ----
# Helpers that leave the caller's process tree, found only by what they inherit.

_HELPER_LIFETIME_S = 120.0  # a helper a broken backend lost ends by itself, after a while

# Double-forks into a new session (so neither its caller's tree nor its process
# group holds it), writes its pid, then serves: listens on all interfaces if
# asked, and outlives its caller, which it never watches.
_DETACHED_HELPER = """
import os, socket, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
if sys.argv[3] == "listen":
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("0.0.0.0", 0))
    sock.listen()
if sys.argv[3] == "loose-shm":
    import mmap
    fd = os.open(f"/dev/shm/harness_loose_{os.getpid()}", os.O_CREAT | os.O_RDWR, 0o644)
    os.fchmod(fd, 0o644)
    os.ftruncate(fd, 4096)
    segment = mmap.mmap(fd, 4096)
    os.close(fd)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(float(sys.argv[2]))
"""


class _WithHelper(_Wrapper):
    """The reference executor plus a helper process that shutdown() stops."""

    mode = "quiet"

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self.helper_pid = self._start_helper()

    def _start_helper(self) -> int:
        import subprocess
        import sys
        import tempfile
        import time

        with tempfile.TemporaryDirectory() as tmp:
            pid_file = os.path.join(tmp, "pid")
            argv = [sys.executable, "-c", _DETACHED_HELPER, pid_file, str(_HELPER_LIFETIME_S), self.mode]
            first = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            first.wait(timeout=30)
            deadline = time.monotonic() + 30
            while not os.path.exists(pid_file) and time.monotonic() < deadline:
                time.sleep(0.02)
            with open(pid_file, encoding="utf-8") as f:
                return int(f.read())

    def shutdown(self) -> None:
        super().shutdown()
        try:
            os.kill(self.helper_pid, 9)
        except ProcessLookupError:
            pass
        try:
            os.unlink(f"/dev/shm/harness_loose_{self.helper_pid}")
        except FileNotFoundError:
            pass


class DetachedHelper(_WithHelper):
    """C13: a helper daemon (double fork, new session) outlives a SIGKILLed caller."""


class HelperListensEverywhere(_WithHelper):
    """C23: a helper process (not a worker) listens on 0.0.0.0."""

    mode = "listen"


class HelperLooseShm(_WithHelper):
    """C23: a helper process (not a worker) maps a shared-memory segment others may read (0644)."""

    mode = "loose-shm"


_SCRUBBED_HELPER = "import time, sys; time.sleep(float(sys.argv[1]))"


class ScrubbedHelper(_Wrapper):
    """C13: a helper started with an empty environment (no tag to inherit) stays
    a child of the caller and outlives it: only the caller's process tree, taken
    before the kill, shows it."""

    def __init__(self, config: ExecutorConfig) -> None:
        import subprocess
        import sys

        super().__init__(config)
        self._helper = subprocess.Popen(
            [sys.executable, "-c", _SCRUBBED_HELPER, str(_HELPER_LIFETIME_S)],
            env={},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def shutdown(self) -> None:
        super().shutdown()
        self._helper.kill()
        self._helper.wait()


class LeavesSessionHelper(_Wrapper):
    """C9 (the leak check after a test): every executor forks a helper (no exec,
    so its /proc environ shows nothing new) into a session of its own, which
    shutdown() forgets."""

    def __init__(self, config: ExecutorConfig) -> None:
        import time
        import warnings

        super().__init__(config)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: the child only sleeps
            pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                if os.fork() == 0:
                    _let_go_of_pipes()
                    time.sleep(_HELPER_LIFETIME_S)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


def _let_go_of_pipes() -> None:
    """What a daemon does: stdio to /dev/null, and no pipe or socket held, so no
    reader of the caller's output waits for it (other descriptors stay)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith(("pipe:", "socket:")):
                os.close(int(name))
        except OSError:
            continue


def unpinned_gloo(config: ExecutorConfig) -> _Wrapper:
    """C23: gloo left unpinned. The reference pins it to loopback with
    ``GLOO_SOCKET_IFNAME`` unless set (harness/executors/mp/worker.py); set empty, torch
    ignores it and binds to whatever the host name resolves to: loopback on a
    machine whose host name resolves there, a host address elsewhere."""
    import dataclasses

    return _Wrapper(dataclasses.replace(config, env={**config.env, "GLOO_SOCKET_IFNAME": ""}))


detached_helper = DetachedHelper
helper_listens_everywhere = HelperListensEverywhere
helper_loose_shm = HelperLooseShm
scrubbed_helper = ScrubbedHelper
leaves_session_helper = LeavesSessionHelper


class NoUniqueReplyRank(_Wrapper):
    """C2 only: ``collective_rpc`` has no ``unique_reply_rank`` parameter (vLLM's
    UniProcExecutor 0.32 has none): passing it is a TypeError. The checks of other
    clauses that narrow a reply must read "blocked by C2" or pass, never FAIL."""

    def collective_rpc(  # type: ignore[override]
        self, method: Any, timeout: Any = None, args: Any = (), kwargs: Any = None, non_block: bool = False
    ) -> Any:
        return self.inner.collective_rpc(method, timeout, args, kwargs, non_block)


def no_unique_reply_rank(config: ExecutorConfig) -> NoUniqueReplyRank:
    return NoUniqueReplyRank(config)


_MONITOR: list[threading.Thread] = []


def _monitor_forever() -> None:
    threading.Event().wait()


class ProcessWideMonitor(_Wrapper):
    """Conformant (C9, C11, C18): the first executor in a process starts one monitor
    thread that stays for the life of the process and serves every later executor,
    as a library's progress-bar monitor does (vLLM's tqdm_monitor): no executor's leak."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        if not _MONITOR:
            _MONITOR.append(threading.Thread(target=_monitor_forever, name="process-monitor", daemon=True))
            _MONITOR[0].start()


def process_wide_monitor(config: ExecutorConfig) -> ProcessWideMonitor:
    return ProcessWideMonitor(config)


class DropsKwargsAndLeaksAThread(DropsKwargs):
    """C3 (listed as a known failure in tests/meta/test_expected.py) and C9: every
    executor also leaves a thread behind, which the leak check finds after the test."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        threading.Thread(target=threading.Event().wait, name="leaked", daemon=True).start()


def drops_kwargs_and_leaks_a_thread(config: ExecutorConfig) -> DropsKwargsAndLeaksAThread:
    return DropsKwargsAndLeaksAThread(config)


# ---- issue 26, no cheap green round 2: every word of SPEC.md, read as an adversary would ----


class CallbacksPerDeath(_Wrapper):
    """C8: the failure callbacks run once per dead worker, not once per executor:
    one death runs each once (today's single-death checks pass), a second death
    runs them all again. Deaths during shutdown() are not counted."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._callbacks: list[Any] = []
        self._closing = threading.Event()
        self._stop_r, self._stop_w = os.pipe()
        procs = list(self.inner._group.processes)  # type: ignore[attr-defined]
        self._monitor = threading.Thread(target=self._watch, args=(procs,), name="per-death-monitor", daemon=True)
        self._monitor.start()

    def _watch(self, procs: list[Any]) -> None:
        from multiprocessing.connection import wait

        alive = {p.sentinel: p for p in procs}
        while alive:
            ready = wait([self._stop_r, *alive])
            if self._stop_r in ready or self._closing.is_set():
                return
            for sentinel in ready:
                alive.pop(sentinel, None)  # type: ignore[call-overload]
                for callback in list(self._callbacks):
                    callback()

    def register_failure_callback(self, callback: Any) -> None:
        self._callbacks.append(callback)

    def shutdown(self) -> None:
        if not self._closing.is_set():
            self._closing.set()
            os.write(self._stop_w, b"x")
            self._monitor.join(30)
            os.close(self._stop_r)
            os.close(self._stop_w)
        super().shutdown()


callbacks_per_death = CallbacksPerDeath


_BOUNDED_FDS: list[int] = []
#: How many executors of a process leave a pipe behind before the leak stops.
_BOUNDED_LEAKS = 5


class BoundedDescriptorLeak(_Wrapper):
    """C10: the first five executors of a process each leave a pipe open, later ones
    none: the excess stops growing after ten cycles, and is still a leak."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        if len(_BOUNDED_FDS) < 2 * _BOUNDED_LEAKS:
            _BOUNDED_FDS.extend(os.pipe())


bounded_descriptor_leak = BoundedDescriptorLeak


_ALL_CALLBACKS: list[Any] = []


class ProcessWideCallbacks(_Wrapper):
    """C18: failure callbacks go into one registry for the whole process, and a
    worker death in any executor runs them all: the other executor's too."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self.inner.register_failure_callback(self._run_all)

    @staticmethod
    def _run_all() -> None:
        callbacks, _ALL_CALLBACKS[:] = list(_ALL_CALLBACKS), []
        for callback in callbacks:
            callback()

    def register_failure_callback(self, callback: Any) -> None:
        _ALL_CALLBACKS.append(callback)


_EXECUTORS: list[Any] = []


class ShutdownStopsEveryExecutor(_Wrapper):
    """C18: shutdown() stops the workers of every executor in the process (one
    process-wide teardown), not only its own."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        _EXECUTORS.append(self.inner)

    def shutdown(self) -> None:
        for inner in list(_EXECUTORS):
            inner.shutdown()
        _EXECUTORS.clear()
        self.inner.shutdown()


_POISONED: list[str] = []


class TimeoutPoisonsTheProcess(_Wrapper):
    """C18: a timed-out call poisons a module-level state: every executor of the
    process then fails its calls and its health check, saying why (which C7
    allows the executor that timed out, and no other)."""

    def _poisoned(self) -> None:
        if _POISONED:
            raise RuntimeError(f"a call timed out earlier in this process ({_POISONED[0]}): the executor is unusable")

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        self._poisoned()
        try:
            return super().collective_rpc(*a, **kw)
        except TimeoutError as exc:
            _POISONED.append(str(exc))
            raise

    def check_health(self) -> None:
        self._poisoned()
        super().check_health()


process_wide_callbacks = ProcessWideCallbacks
shutdown_stops_every_executor = ShutdownStopsEveryExecutor
timeout_poisons_the_process = TimeoutPoisonsTheProcess


class SortedReplies(_Wrapper):
    """C1: a blocking call's results come back sorted, not in rank order (the same
    thing wherever rank r answers r, as most probes do)."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if isinstance(out, list):
            try:
                return sorted(out)
            except TypeError:
                return out
        return out


def _captured(worker: Any, method: Any, args: Any, kwargs: Any) -> tuple[bool, Any]:
    try:
        return True, _run(worker, method, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - handed to the caller
        return False, f"rank {worker.rank}: {exc!r}"


class StaleRepliesAfterAnError(_Wrapper):
    """C6: a blocking call that fails on one rank leaves the other ranks' replies
    queued, and the next call takes them as its own (vLLM's reply queues, read
    until the first error)."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._stale: dict[int, Any] = {}

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        if non_block or unique_reply_rank is not None:
            return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)
        replies = self.inner.collective_rpc(_captured, timeout, (method, args, kwargs))
        stale, self._stale = self._stale, {}
        replies = [(True, stale[r]) if r in stale else reply for r, reply in enumerate(replies)]
        failed = [r for r, (ok, _) in enumerate(replies) if not ok]
        if failed:
            self._stale = self._left_unread(replies, failed[0])
            raise RuntimeError(replies[failed[0]][1])
        return [value for _, value in replies]

    def _left_unread(self, replies: list[tuple[bool, Any]], failed: int) -> dict[int, Any]:
        """The replies the next call takes as its own, the lowest failing rank
        being ``failed``: every rank's that succeeded."""
        return {r: value for r, (ok, value) in enumerate(replies) if ok}


class LateRangeCheck(_Wrapper):
    """C2: with non_block=True an out-of-range unique_reply_rank is sent to the
    workers, and only the future fails with ValueError (blocking calls check first)."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        if non_block and unique_reply_rank is not None and not 0 <= unique_reply_rank < self.world_size:
            sent = self.inner.collective_rpc(method, timeout, args, kwargs, True)
            failed: concurrent.futures.Future[Any] = concurrent.futures.Future()
            sent.add_done_callback(
                lambda _: failed.set_exception(ValueError(f"unique_reply_rank={unique_reply_rank} is out of range"))
            )
            return failed
        return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)


sorted_replies = SortedReplies
stale_replies_after_an_error = StaleRepliesAfterAnError
late_range_check = LateRangeCheck


class ExitKeepsRunningWhenTheBodyRaises(_Wrapper):
    """C11: leaving the with block shuts down only when the body returned; an
    exception leaves the executor running."""

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.shutdown()


class TruncatedResults(_Wrapper):
    """C17: results over 1 MiB come back cut to 1 MiB (arguments arrive whole)."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if isinstance(out, list):
            return [r[: 1 << 20] if isinstance(r, bytes) else r for r in out]
        return out


exit_keeps_running_when_the_body_raises = ExitKeepsRunningWhenTheBodyRaises
truncated_results = TruncatedResults


class FailsFirstPendingOnly(_Wrapper):
    """C8: when a worker dies, only the oldest pending non-blocking call fails; the
    others stay pending for good (one pending call, as a check may have, fails)."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._lock = threading.Lock()
        self._failed_one = False

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if not kw.get("non_block"):
            return out
        outer: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def copy(inner: Any) -> None:
            from harness.contract import WorkerDiedError

            error = inner.exception()
            if error is None:
                outer.set_result(inner.result())
                return
            if isinstance(error, WorkerDiedError):
                with self._lock:
                    if self._failed_one:
                        return  # the bug: left pending
                    self._failed_one = True
            outer.set_exception(error)

        out.add_done_callback(copy)
        return outer


fails_first_pending_only = FailsFirstPendingOnly


# --------------------------------------------------------------------------- temporary folder, semaphores


def _bind_a_socket_file(worker: Any) -> str:
    """In a worker: bind a unix socket in the worker's temporary folder, and forget it there."""
    import socket
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"meta-{os.getpid()}-{worker.rank}.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()  # the file stays: nothing unlinks it
    return path


def _create_a_named_semaphore(worker: Any) -> str:
    """In a worker: create a POSIX named semaphore (/dev/shm/sem.*) and never unlink it."""
    import _multiprocessing

    name = f"/harness-meta-{os.getpid()}-{worker.rank}"
    _multiprocessing.SemLock(1, 1, 1, name, False)  # kind SEMAPHORE, value 1, max 1, unlink: no
    return name


class LeavesASocketFile(_Wrapper):
    """C9 (the leak check after a test): each worker leaves a unix socket file in
    its temporary folder, which shutdown() never removes."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self.inner.collective_rpc(_bind_a_socket_file)


class LeavesANamedSemaphore(_Wrapper):
    """C9 (the leak check after a test): each worker creates a named semaphore
    that nothing unlinks."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self.inner.collective_rpc(_create_a_named_semaphore)


leaves_a_socket_file = LeavesASocketFile
leaves_a_named_semaphore = LeavesANamedSemaphore


# ---- issue 26, no cheap green round 2: sentences no broken backend failed yet ----


class PendingFutureAfterShutdown(_Wrapper):
    """C9, "A call after shutdown raises promptly: `collective_rpc` itself raises,
    with `non_block=True` too": a blocking call after shutdown() raises, but a
    non-blocking one hands back a future that never completes."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._stopped = False

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        if non_block and self._stopped:
            return concurrent.futures.Future()
        return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)

    def shutdown(self) -> None:
        self._stopped = True
        super().shutdown()


class SecondShutdownRunsCallbacks(_Wrapper):
    """C9, "A second `shutdown()` is a no-op": a second shutdown() runs the
    registered failure callbacks, as if the executor had failed (the first one
    runs none, as the reference executor's does)."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._callbacks: list[Any] = []
        self._shut = False

    def register_failure_callback(self, callback: Any) -> None:
        self._callbacks.append(callback)
        super().register_failure_callback(callback)

    def shutdown(self) -> None:
        if self._shut:
            for callback in self._callbacks:
                callback()
            return
        self._shut = True
        super().shutdown()


pending_future_after_shutdown = PendingFutureAfterShutdown
second_shutdown_runs_callbacks = SecondShutdownRunsCallbacks


class _EqualFacade(_FutureProxy):
    """Another facade over the same future: equal to every facade over it, and
    hashed alike, but not the object the caller holds."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _FutureProxy) and other.inner is self.inner

    def __hash__(self) -> int:
        return id(self.inner)


class _CallbacksGetAFacade(_EqualFacade):
    def add_done_callback(self, fn: Any) -> None:
        self.inner.add_done_callback(lambda inner: fn(_EqualFacade(inner)))


class CallbacksGetAnEqualFuture(_ProxiedFutures):
    """C21, "runs once the future completes, with that future": done-callbacks
    are called with a new facade over the same call, equal to the future the
    caller holds (same call, same result) but not that future."""

    proxy = _CallbacksGetAFacade


class DropsKwargsOfStringMethods(_Wrapper):
    """C3, "for string and callable methods": kwargs reach a callable, but a
    method named by a string, sent on a path of its own, loses them."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        if isinstance(method, str):
            kwargs = None
        return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)


callbacks_get_an_equal_future = CallbacksGetAnEqualFuture
drops_kwargs_of_string_methods = DropsKwargsOfStringMethods


class ClampsWorldSize(_Wrapper):
    """C20, "world_size < 1 (`ValueError` at construction)": a world size below
    one is taken as one, silently, instead of refused."""

    def __init__(self, config: ExecutorConfig) -> None:
        if config.world_size < 1:
            config = dataclasses.replace(config, world_size=1)
        super().__init__(config)


class UnnamedUnknownMethod(_Wrapper):
    """C20, "an unknown method name (error naming it)": the error for a method
    name the workers lack says only that a method is missing, not which."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        try:
            return super().collective_rpc(*a, **kw)
        except AttributeError:
            raise RuntimeError("a worker has no such method") from None
        except Exception as exc:
            method = a[0] if a else kw.get("method")
            if isinstance(method, str) and method in str(exc):
                raise RuntimeError("a worker has no such method") from None
            raise


clamps_world_size = ClampsWorldSize
unnamed_unknown_method = UnnamedUnknownMethod


# ---- issue 26, round 3: more of the "none yet" rows (C5, C7, C9, C20) ----


class _OverriddenFuture(_FutureProxy):
    """A facade whose result the wrapper may replace once the call is done."""

    _unset = object()

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.override: Any = self._unset
        self.read = False  # whether the caller has taken the result

    def result(self, timeout: Any = None) -> Any:
        got = self.inner.result(timeout)
        self.read = True
        return got if self.override is self._unset else self.override


class _PreviousResultFuture(_FutureProxy):
    def __init__(self, inner: Any, previous: Any) -> None:
        super().__init__(inner)
        self.previous = previous

    def result(self, timeout: Any = None) -> Any:
        own = self.inner.result(timeout)
        return own if self.previous is None else self.previous.result()


class PreviousCallsResult(_Wrapper):
    """C5, "each future gets its own call's result": every future but the first
    resolves to the result of the call submitted before it. They still complete
    in submission order."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._previous: Any = None

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if not kw.get("non_block"):
            return out
        future = _PreviousResultFuture(out, self._previous)
        self._previous = out
        return future


class BlockingTakesAPendingReply(_Wrapper):
    """C5, "blocking calls interleaved with pending non-blocking ones take nothing
    from them": a blocking call made while a future is unread returns that
    future's call's result, and the future gets the blocking call's."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._pending: list[_OverriddenFuture] = []

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if kw.get("non_block"):
            future = _OverriddenFuture(out)
            self._pending.append(future)
            return future
        # Futures the caller has not read yet, done or not: in-order completion
        # finished them before this call's reply came.
        self._pending = [f for f in self._pending if not f.read]
        if not self._pending:
            return out
        taken = self._pending.pop(0)
        theirs = taken.inner.result()
        taken.override = out
        return theirs


class _CountedFuture(_FutureProxy):
    def __init__(self, inner: Any, read: Any) -> None:
        super().__init__(inner)
        self._read = read
        self._counted = False

    def _once(self) -> None:
        if not self._counted:
            self._counted = True
            self._read()

    def result(self, timeout: Any = None) -> Any:
        out = self.inner.result(timeout)
        self._once()
        return out

    def exception(self, timeout: Any = None) -> Any:
        out = self.inner.exception(timeout)
        self._once()
        return out


class UnreadRepliesBlockNewCalls(_Wrapper):
    """C5, "Hundreds of calls in flight at once all complete correctly (no
    deadlock when replies back up)": a reply channel of 64 slots, each freed
    only when the caller reads its future; the 65th call in flight waits for a
    slot, for good, while the caller has not read one."""

    SLOTS = 64

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._unread = 0
        self._freed = threading.Condition()

    def _read(self) -> None:
        with self._freed:
            self._unread -= 1
            self._freed.notify_all()

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        if not kw.get("non_block"):
            return super().collective_rpc(*a, **kw)
        with self._freed:
            self._freed.wait_for(lambda: self._unread < self.SLOTS)
            self._unread += 1
        return _CountedFuture(super().collective_rpc(*a, **kw), self._read)


class LateReplyToTheNextCall(_Wrapper):
    """C7, "it never hands a late reply to a later call": a call that timed out
    is left running, and its reply, when it comes, is the next call's result."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._late: Any = None

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        if non_block or timeout is None:
            own = self.inner.collective_rpc(method, None, args, kwargs, non_block, unique_reply_rank)
        else:
            future = self.inner.collective_rpc(method, None, args, kwargs, True, unique_reply_rank)
            try:
                own = future.result(timeout)
            except TimeoutError:
                self._late = future
                raise
        if self._late is not None and not non_block:
            late, self._late = self._late, None
            return late.result()
        return own


class UnusableAfterAnUnpicklableResult(_Wrapper):
    """C20, "an unpicklable result" (and "leaves the executor usable"): the error
    is raised, and every call after it fails."""

    #: What an error's text (lower case) holds for the executor to give up.
    breaks_on = "pickl"

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._broken: str | None = None

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        if self._broken is not None:
            raise RuntimeError(f"executor unusable since an earlier call's result failed: {self._broken}")
        try:
            return super().collective_rpc(*a, **kw)
        except Exception as exc:
            if self.breaks_on in str(exc).lower():
                self._broken = str(exc)[:200]
            raise


_LIVE: list[Any] = []


class SecondShutdownStopsTheOthers(_Wrapper):
    """C9, "A second `shutdown()` is a no-op": a second shutdown() is taken as
    "clean everything up" and shuts down every other executor of the process."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._shut = False
        _LIVE.append(self)

    def shutdown(self) -> None:
        if self._shut:
            for other in [e for e in _LIVE if e is not self]:
                other.shutdown()
            return
        self._shut = True
        if self in _LIVE:
            _LIVE.remove(self)
        super().shutdown()


previous_calls_result = PreviousCallsResult
blocking_takes_a_pending_reply = BlockingTakesAPendingReply
unread_replies_block_new_calls = UnreadRepliesBlockNewCalls
late_reply_to_the_next_call = LateReplyToTheNextCall
unusable_after_an_unpicklable_result = UnusableAfterAnUnpicklableResult
second_shutdown_stops_the_others = SecondShutdownStopsTheOthers


# ---- across nodes (nodes > 1): ray on simulated nodes --------------------------


def ray_ranks_on_one_node(config: ExecutorConfig) -> Any:
    """C14, "With `nodes=k`, the ranks run on k different machines": asked for
    k nodes, it packs every rank onto one (``ray`` as for ``nodes=1``), and works."""
    from harness.executors.ray.executor import RayExecutor

    return RayExecutor(dataclasses.replace(config, nodes=1))


ray_ranks_on_one_node.nodes = (1, 2)  # type: ignore[attr-defined]
ray_ranks_on_one_node.start_methods = ("spawn",)  # type: ignore[attr-defined]


def _ray_group(base: Any) -> Any:
    """A ``ray`` executor whose per-executor state is ``base``, a subclass of
    its ``_Group`` that breaks one thing."""
    from harness.executors._group import GroupExecutor

    class Broken(GroupExecutor):
        def __init__(self, config: ExecutorConfig) -> None:
            super().__init__(config, lambda: base(config, None))

    return Broken


def ray_rendezvous_in_tmp(config: ExecutorConfig) -> Any:
    """Across nodes, the process group meets through a file in rank 0's
    ``/tmp``, as on one node: the other node's ranks never see it (machines
    share no file system), and start-up cannot complete. It gives up after
    30 s, not 120, to keep the meta test short."""
    import os as _os

    from harness.executors.ray.executor import _Group

    class FileRendezvous(_Group):  # type: ignore[misc]
        def _rendezvous(self, deadline: float) -> tuple[str, None]:
            self.store_dir = self._init_step("start", [self.actors[0].make_store_dir.remote()], deadline)[0]
            self.store_local = self.local[0]
            return _os.path.join(str(self.store_dir), "store"), None

    return _ray_group(FileRendezvous)(dataclasses.replace(config, init_timeout_s=min(config.init_timeout_s, 30.0)))


def ray_node_death_unnoticed(config: ExecutorConfig) -> Any:
    """C8 across nodes: it learns of a death only from its own machine's
    processes (pidfds), so a rank on another node that dies is never noticed:
    its call's reply never comes, later calls hang, ``check_health()`` passes
    and no callback runs. It works otherwise."""
    import time as _time

    from harness.contract import WorkerDiedError
    from harness.executors.ray.executor import _Group

    class Deaf(_Group):  # type: ignore[misc]
        def fail(self, rank: int, detail: str = "") -> WorkerDiedError:
            if self.local[rank] if rank < len(self.local) else True:
                return super().fail(rank, detail)  # type: ignore[no-any-return]
            return WorkerDiedError(rank, None, None, "unnoticed")  # never recorded: nobody learns of it

        def dead_rank(self) -> int | None:
            rank = super().dead_rank()
            return rank if rank is not None and self.local[rank] else None

        def _receive(self, timeout: float | None) -> list[Any]:
            try:
                return super()._receive(timeout)  # type: ignore[no-any-return]
            except WorkerDiedError as exc:
                if exc.rank is not None and self.local[exc.rank]:
                    raise
                _time.sleep(0.25 if timeout is None else min(timeout, 0.25))
                return []  # the dead rank's reply is dropped: its call waits for ever

    return _ray_group(Deaf)(config)


def ray_outlives_the_caller(config: ExecutorConfig) -> Any:
    """C13 across nodes: its placement group and actors are detached (Ray keeps
    them when their driver dies), and a rank whose channel to the caller closes
    stays instead of exiting, so when the caller is SIGKILLed every worker on
    every node runs on. A normal shutdown still stops them (Ray kills them)."""
    import ray

    from harness.executors.ray.executor import _Group, _RankActor

    class Lingering(_RankActor):  # type: ignore[misc]
        def serve(self, store_dir: str | None) -> None:
            # The channel ends the rank with os._exit when the caller is gone: not this one.
            os._exit = lambda code: time.sleep(3600)  # type: ignore[assignment]
            _RankActor.serve(self, store_dir)

    class Detached(_Group):  # type: ignore[misc]
        lifetime = "detached"
        actor_class = ray.remote(Lingering)

    return _ray_group(Detached)(config)


for _spans_nodes in (ray_rendezvous_in_tmp, ray_node_death_unnoticed, ray_outlives_the_caller):
    _spans_nodes.nodes = (1, 2)  # type: ignore[attr-defined]
    _spans_nodes.start_methods = ("spawn",)  # type: ignore[attr-defined]


def _leave_in_shm(worker: Any) -> str:
    """A file in this rank's node's /dev/shm, never removed."""
    path = f"/dev/shm/harness-left-{os.getpid()}"
    with open(path, "wb") as f:
        f.write(b"left")
    return path


def ray_leaves_shm_on_nodes(config: ExecutorConfig) -> Any:
    """C9 across nodes: each rank leaves a file in its node's /dev/shm (so
    every node has one), which nothing removes; the caller's machine has none."""
    from harness.executors.ray.executor import RayExecutor

    ex = RayExecutor(config)
    ex.collective_rpc(_leave_in_shm)
    return ex


ray_leaves_shm_on_nodes.nodes = (1, 2)  # type: ignore[attr-defined]
ray_leaves_shm_on_nodes.start_methods = ("spawn",)  # type: ignore[attr-defined]


def ray_undeclared_listeners(config: ExecutorConfig) -> Any:
    """C23 across nodes: ``ray`` without its declaration of C23. Ray's own gRPC
    servers in every worker listen on every interface (``::``) on every node."""
    from harness.executors.ray.executor import RayExecutor

    return RayExecutor(config)


ray_undeclared_listeners.nodes = (1, 2)  # type: ignore[attr-defined]
ray_undeclared_listeners.start_methods = ("spawn",)  # type: ignore[attr-defined]


# ---- issue 28: pipeline parallelism with steps in flight (C16) ---------------------


def _settle(source: concurrent.futures.Future[Any], target: concurrent.futures.Future[Any]) -> None:
    """``target`` takes ``source``'s outcome (``source`` is done)."""
    if target.done():
        return
    exc = source.exception()
    if exc is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


class _Driven(concurrent.futures.Future):  # type: ignore[type-arg]
    """A future that, when looked at, first looks at the inner futures it
    depends on: a backend's future may make progress only when its caller asks."""

    def __init__(self, drive: Any) -> None:
        super().__init__()
        self._drive = drive

    def done(self) -> bool:
        self._drive()
        return super().done()

    def result(self, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done() and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.005)
        return super().result(0)


class NarrowedOutOfOrder(_Wrapper):
    """C16 (C5's order where it matters most): a narrowed non_block call's future
    completes only half a second after the next narrowed call's has (or 2 s
    after its reply came, where no next one does), so steps in flight complete
    out of submission order. Plain futures keep their order."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._held: tuple[concurrent.futures.Future[Any], concurrent.futures.Future[Any]] | None = None
        self._inner: list[concurrent.futures.Future[Any]] = []
        self._lock = threading.Lock()

    def _drive(self) -> None:
        for f in list(self._inner):
            if f.done():
                with self._lock:
                    if f in self._inner:
                        self._inner.remove(f)

    def _release(self, mine: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            held = self._held
            if held is None or held[0] is not mine:
                return
            self._held = None
        _settle(held[1], held[0])

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        out = self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)
        if not (non_block and unique_reply_rank is not None):
            return out
        mine = _Driven(self._drive)

        def arrived(f: concurrent.futures.Future[Any]) -> None:
            with self._lock:
                held, self._held = self._held, None
                if held is None:
                    self._held = (mine, f)
                    threading.Timer(2.0, self._release, args=(mine,)).start()
                    return
            _settle(f, mine)  # the later call's future first, the earlier one's after it
            threading.Timer(0.5, _settle, args=(held[1], held[0])).start()

        with self._lock:
            self._inner.append(out)
        out.add_done_callback(arrived)
        return mine


def narrowed_out_of_order(config: ExecutorConfig) -> NarrowedOutOfOrder:
    return NarrowedOutOfOrder(config)


class NarrowedToRankZero(_Wrapper):
    """C16 (C2's narrowing where it matters most): a narrowed non_block call's
    future resolves to rank 0's reply, whichever rank was asked for; blocking
    narrowed calls are right."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        if not (non_block and unique_reply_rank is not None):
            return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)
        if not 0 <= unique_reply_rank < self.world_size:  # C2's range check stays right
            raise ValueError(f"unique_reply_rank {unique_reply_rank} is out of range 0..{self.world_size - 1}")
        return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, 0)


def narrowed_to_rank_zero(config: ExecutorConfig) -> NarrowedToRankZero:
    return NarrowedToRankZero(config)


# ---- found by a chaos run (harness.chaos) ---------------------------------------------


def _kept(worker: Any, method: Any, args: Any, kwargs: Any) -> Any:
    import pickle

    out = _run(worker, method, args, kwargs)
    # A copy of its own, whatever buffers the result shares with the executor's transport.
    worker.__dict__.setdefault("_harness_kept", []).append(pickle.dumps(out))
    return out


class KeepsEachResult(_Wrapper):
    """C10, "an executor keeps nothing of a completed call": each worker keeps every
    result it sent (vLLM's workers kept every last output alive, vllm-project/vllm#54422)."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        return self.inner.collective_rpc(_kept, timeout, (method, args, kwargs), None, non_block, unique_reply_rank)


keeps_each_result = KeepsEachResult


# ---- idle workers (C25) -----------------------------------------------------------


def _spin_for_good(worker: Any) -> int:
    """Starts a thread in the worker that polls in a busy loop for as long as the
    process lives: a reader that never sleeps (as a Ray compiled graph's did)."""

    def spin() -> None:
        while True:
            pass

    threading.Thread(target=spin, name="never-sleeping-reader", daemon=True).start()
    return int(worker.rank)


class SpinningWorkers(_Wrapper):
    """C25: each worker runs a thread that polls in a busy loop, idle or not (the
    caller stays quiet: C19 passes)."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        try:
            self.inner.collective_rpc(_spin_for_good)
        except BaseException:
            self.inner.shutdown()
            raise


spinning_workers = SpinningWorkers


def _spin_once_idle(worker: Any, stamp: str, idle_s: float) -> int:
    """Starts a thread in the worker that sleeps while a call came within
    ``idle_s`` (the caller touches ``stamp`` at each call), and polls in a busy
    loop once none has: a keep-alive timer that falls into a spin. It ends when
    ``stamp`` is removed (shutdown)."""

    def watch() -> None:
        while True:
            try:
                last = os.stat(stamp).st_mtime
            except OSError:
                return
            if time.time() - last < idle_s:
                time.sleep(0.2)
            # else: the bug, no wait at all

    threading.Thread(target=watch, name="keep-alive-timer", daemon=True).start()
    return int(worker.rank)


class WorkersSpinOnceIdleAWhile(_Wrapper):
    """C25 at a later moment: each worker sleeps for the first 6 s after a call,
    then polls in a busy loop until the next one (the first 2 s window, from
    3.5 s, sees it asleep; "once no call has been in flight for 3 s" holds at
    every later moment too)."""

    IDLE_S = 6.0

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        fd, self._stamp = tempfile.mkstemp(prefix="last-call-")
        os.close(fd)
        try:
            self.inner.collective_rpc(_spin_once_idle, args=(self._stamp, self.IDLE_S))
        except BaseException:
            self.shutdown()
            raise

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        self._touch()
        try:
            return super().collective_rpc(*a, **kw)
        finally:
            self._touch()

    def _touch(self) -> None:
        with contextlib.suppress(OSError):
            os.utime(self._stamp)

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self._stamp)
        super().shutdown()


workers_spin_once_idle_a_while = WorkersSpinOnceIdleAWhile


class SpinsAfterEachCall(_Wrapper):
    """Conformant (C25): each worker looks at its ring for 1 s after a call,
    yielding the core each time, before it sleeps: a short spin, allowed."""

    def __init__(self, config: ExecutorConfig) -> None:
        self.inner = MultiprocExecutor(config, worker_spin_s=1.0)
        self.world_size = config.world_size


spins_after_each_call = SpinsAfterEachCall


# ---- issue 51, no cheap green round 3: the cases a sentence's words reach ----


class _NoExceptionFuture(_FutureProxy):
    """exception() waits as result() does, then reads an error the failure path never recorded."""

    def exception(self, timeout: Any = None) -> Any:
        try:
            self.inner.result(timeout)
        except TimeoutError:
            raise
        except Exception:  # noqa: BLE001 - the bug: the error is not kept for exception()
            return None
        return None


class ExceptionSaysNone(_ProxiedFutures):
    """C4: a failed call's future says exception() is None (result() raises, as it should)."""

    proxy = _NoExceptionFuture


exception_says_none = ExceptionSaysNone


class _DoneWhenSentFuture(_FutureProxy):
    """done() says the request went out, not that the call completed."""

    def done(self) -> bool:
        return True


class DoneWhenSent(_ProxiedFutures):
    """C4: done() is True as soon as collective_rpc returned, before the call completed."""

    proxy = _DoneWhenSentFuture


done_when_sent = DoneWhenSent


def _error_only_on(worker: Any, reply_rank: int, method: Any, args: Any, kwargs: Any) -> Any:
    """``method`` on ``worker``; an exception on any rank but ``reply_rank`` becomes None."""
    try:
        return _run(worker, method, args, kwargs)
    except Exception:
        if worker.rank == reply_rank:
            raise
        return None


class NarrowedHidesOtherRanksErrors(_Wrapper):
    """C6: with unique_reply_rank=r only rank r's reply is read; an exception on
    another rank is lost (vLLM's workers answer a narrowed call from rank r only)."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        if unique_reply_rank is None or not 0 <= unique_reply_rank < self.world_size:
            return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)
        wrapped = (unique_reply_rank, method, args, kwargs)
        return self.inner.collective_rpc(_error_only_on, timeout, wrapped, None, non_block, unique_reply_rank)


narrowed_hides_other_ranks_errors = NarrowedHidesOtherRanksErrors


class LateReplyToTheNextFuture(_Wrapper):
    """C7, with non_block=True: a future whose timeout passed fails with
    TimeoutError, but its call is left pending, and its reply, when it comes, is
    the next call's result (blocking calls time out correctly)."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._late: Any = None

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        late, self._late = self._late, None
        if late is not None:
            own = self.inner.collective_rpc(method, None, args, kwargs, non_block, unique_reply_rank)
            if not non_block:
                return late.result()
            handed: concurrent.futures.Future[Any] = concurrent.futures.Future()
            own.add_done_callback(lambda _own: _settle(late, handed))
            return handed
        if not non_block or timeout is None:
            return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)
        inner = self.inner.collective_rpc(method, None, args, kwargs, True, unique_reply_rank)
        timed: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def expire() -> None:
            if not inner.done() and timed.set_running_or_notify_cancel():
                self._late = inner
                timed.set_exception(TimeoutError(f"collective_rpc timed out after {timeout} s"))

        inner.add_done_callback(lambda _inner: None if timed.done() else _settle(inner, timed))
        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        return timed


late_reply_to_the_next_future = LateReplyToTheNextFuture


class CallbacksStopAtARaise(_Wrapper):
    """C8: the failure callbacks run in a loop that the first one to raise ends:
    the ones after it never run."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._callbacks: list[Any] = []
        self.inner.register_failure_callback(self._run_all)

    def register_failure_callback(self, callback: Any) -> None:
        self._callbacks.append(callback)

    def _run_all(self) -> None:
        try:
            for callback in self._callbacks:
                callback()
        except Exception:  # noqa: BLE001 - the bug: one raising callback ends the loop
            return


callbacks_stop_at_a_raise = CallbacksStopAtARaise


#: Where CorruptsLargeResults changes a byte: past the largest result the suite
#: checked byte by byte before (16 MiB).
_CORRUPT_AT = 24 << 20


class CorruptsLargeResults(_Wrapper):
    """C17: a result longer than 24 MiB comes back with one byte changed past
    that offset (arguments and smaller results arrive intact)."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if isinstance(out, list):
            return [_corrupted(r) for r in out]
        return out


def _corrupted(value: Any) -> Any:
    if not isinstance(value, bytes) or len(value) <= _CORRUPT_AT:
        return value
    changed = bytearray(value)
    changed[_CORRUPT_AT] ^= 0xFF
    return bytes(changed)


corrupts_large_results = CorruptsLargeResults


class SpinsOnceIdleAWhile(_Wrapper):
    """C19: a watchdog thread sleeps between calls, but once no call has come for
    3 s it polls for the next one in a busy loop (a "deep idle" mode gone wrong)."""

    IDLE_S = 3.0

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="idle-watchdog", daemon=True)
        self._thread.start()

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        self._last = time.monotonic()
        try:
            return super().collective_rpc(*a, **kw)
        finally:
            self._last = time.monotonic()

    def _watch(self) -> None:
        while not self._stop.is_set():
            if time.monotonic() - self._last < self.IDLE_S:
                self._stop.wait(0.2)
            # else: the bug, no wait at all

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join()
        super().shutdown()


spins_once_idle_a_while = SpinsOnceIdleAWhile


class UnloadableResultBreaksTheExecutor(UnusableAfterAnUnpicklableResult):
    """C20, "an unpicklable result", one the caller cannot load: the error is
    raised, and the executor takes it for a broken channel and fails every call
    after it."""

    breaks_on = "no module named"


unloadable_result_breaks_the_executor = UnloadableResultBreaksTheExecutor


class DropsNoneReplies(_Wrapper):
    """C1: a rank whose reply is None is left out of the list (a reader that
    takes "no value" for "no reply")."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if isinstance(out, list) and kw.get("unique_reply_rank") is None:
            return [r for r in out if r is not None]
        return out


drops_none_replies = DropsNoneReplies


class _ZeroMeansForeverFuture(_FutureProxy):
    """``if timeout:``: a timeout of 0 reads as no timeout, a wait for good."""

    def result(self, timeout: Any = None) -> Any:
        return self.inner.result(timeout or None)

    def exception(self, timeout: Any = None) -> Any:
        return self.inner.exception(timeout or None)


class ZeroTimeoutWaits(_ProxiedFutures):
    """C4: result(timeout=0) on a pending future waits for the call instead of raising TimeoutError."""

    proxy = _ZeroMeansForeverFuture


zero_timeout_waits = ZeroTimeoutWaits


class StopsReadingAtTheFirstError(StaleRepliesAfterAnError):
    """C6: replies are read in rank order and the reading stops at the first
    error: the replies of the ranks after it are taken by the next call (a
    failure on the last rank leaves none behind)."""

    def _left_unread(self, replies: list[tuple[bool, Any]], failed: int) -> dict[int, Any]:
        return {r: value for r, (ok, value) in enumerate(replies) if ok and r > failed}


stops_reading_at_the_first_error = StopsReadingAtTheFirstError


def _exception_whole(worker: Any, method: Any, args: Any, kwargs: Any) -> tuple[bool, Any]:
    """``method``'s value, or the exception it raised, pickled whole."""
    import pickle

    try:
        return True, _run(worker, method, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - handed to the caller, pickled whole
        return False, pickle.dumps(exc)


class PicklesExceptionsWhole(_Wrapper):
    """C6: a worker's exception travels pickled whole; one the caller cannot
    load becomes an error that has lost the worker's message."""

    def collective_rpc(
        self,
        method: Any,
        timeout: Any = None,
        args: Any = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: Any = None,
    ) -> Any:
        if non_block or unique_reply_rank is not None:
            return self.inner.collective_rpc(method, timeout, args, kwargs, non_block, unique_reply_rank)
        import pickle

        replies = self.inner.collective_rpc(_exception_whole, timeout, (method, args, kwargs))
        for rank, (ok, value) in enumerate(replies):
            if not ok:
                try:
                    error = pickle.loads(value)
                except Exception as exc:
                    raise RuntimeError(f"rank {rank} raised an exception the caller cannot load") from exc
                raise error
        return [value for _, value in replies]


pickles_exceptions_whole = PicklesExceptionsWhole


class _DeathWatched(_Wrapper):
    """Knows when a worker died (its own failure callback) and when it was shut down."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self.dead = threading.Event()
        self.closed = threading.Event()
        self.inner.register_failure_callback(self.dead.set)

    def shutdown(self) -> None:
        self.closed.set()
        super().shutdown()


class LaterFuturesHangAfterADeath(_DeathWatched):
    """C8, "every later call": after a death, blocking calls fail, but a
    non-blocking call's future is queued for a reader that is gone and never completes."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        if kw.get("non_block") and self.dead.is_set():
            return concurrent.futures.Future()
        return super().collective_rpc(*a, **kw)


later_futures_hang_after_a_death = LaterFuturesHangAfterADeath


class NarrowedWaitsForItsRankOnly(_Wrapper):
    """C8, "every pending call": a non-blocking call narrowed to one rank waits
    for that rank's reply alone, and a death elsewhere never fails it."""

    def collective_rpc(self, *a: Any, **kw: Any) -> Any:
        out = super().collective_rpc(*a, **kw)
        if not kw.get("non_block") or kw.get("unique_reply_rank") is None:
            return out
        handed: concurrent.futures.Future[Any] = concurrent.futures.Future()
        out.add_done_callback(lambda f: handed.set_result(f.result()) if f.exception() is None else None)
        return handed


narrowed_waits_for_its_rank_only = NarrowedWaitsForItsRankOnly


class LargeArgumentsBlockAfterADeath(_DeathWatched):
    """C8, "every later call": after a death, a call whose argument is larger
    than the channel's buffer blocks writing it for a reader that is gone (until shutdown)."""

    def collective_rpc(self, method: Any, timeout: Any = None, args: Any = (), *a: Any, **kw: Any) -> Any:
        if self.dead.is_set() and sum(len(x) for x in args if isinstance(x, bytes)) > 16 << 20:
            self.closed.wait()
            raise RuntimeError("executor shut down")
        return super().collective_rpc(method, timeout, args, *a, **kw)


large_arguments_block_after_a_death = LargeArgumentsBlockAfterADeath


class SpinsAfterADeath(_DeathWatched):
    """C19: once a worker died, a reader thread polls its closed connection in a
    busy loop until shutdown."""

    def __init__(self, config: ExecutorConfig) -> None:
        super().__init__(config)
        self._reader = threading.Thread(target=self._read, name="reply-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        self.dead.wait()
        while not self.closed.is_set():
            pass  # the bug: the connection is closed, and every read returns at once

    def shutdown(self) -> None:
        self.closed.set()
        self._reader.join()
        super().shutdown()


spins_after_a_death = SpinsAfterADeath


class _DoneOnlyOnceReadFuture(_FutureProxy):
    """done() reports what result() found: a future nobody waits on stays "not done"."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._read = False

    def result(self, timeout: Any = None) -> Any:
        try:
            return self.inner.result(timeout)
        finally:
            self._read = self.inner.done()

    def exception(self, timeout: Any = None) -> Any:
        try:
            return self.inner.exception(timeout)
        finally:
            self._read = self.inner.done()

    def done(self) -> bool:
        return self._read


class DoneOnlyOnceRead(_ProxiedFutures):
    """C4: the future completes only when result() or exception() drives it:
    polling done() alone never sees the call complete."""

    proxy = _DoneOnlyOnceReadFuture


done_only_once_read = DoneOnlyOnceRead
