"""What the built-in executors with worker processes (``mp``, ``ray``) share:
the public API over a worker group, and the once-only failure bookkeeping.

An executor owns a *group* (``WorkerGroup``): its workers, its FIFO queue of
pending calls and how a call is sent. The executor object holds the group
apart from itself so that ``weakref.finalize`` can close the group when the
executor is dropped (C12).
"""

from __future__ import annotations

import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from harness.contract import (
    ExecutorConfig,
    ExecutorShutdownError,
    SerializationError,
    WorkerDiedError,
    method_name,
)
from harness.executors._validate import validate_call
from harness.executors._wire import dumps_call
from harness.executors.futures import FutureQueue, PendingCall

__all__ = ["Failure", "GroupExecutor", "WorkerGroup"]

_Self = TypeVar("_Self", bound="GroupExecutor")


class Failure:
    """A group's first worker death and the callbacks it runs, each exactly once (C8)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.error: WorkerDiedError | None = None

    def record(self, make: Callable[[], WorkerDiedError], queue: FutureQueue) -> WorkerDiedError:
        """The first call records ``make()``; every call fails the queue with the
        recorded error, and the callbacks run on the first."""
        with self._lock:
            if self.error is None:
                self.error = make()
                callbacks, self._callbacks = self._callbacks, []
            else:
                callbacks = []
            error = self.error
        queue.fail_all(error)
        for callback in callbacks:
            _run_callback(callback)
        return error

    def add_callback(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if self.error is None:
                self._callbacks.append(callback)
                return
        _run_callback(callback)  # failed already: run it now, once


def _run_callback(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # noqa: BLE001 - one bad callback must not stop the others
        traceback.print_exc()


class WorkerGroup(Protocol):
    """One executor's workers, as ``GroupExecutor`` drives them."""

    closed: bool
    queue: FutureQueue
    failure: Failure
    pids: list[int | None]

    def start(self) -> None: ...

    def send(self, call: PendingCall, body: bytes) -> None:
        """Send a registered call (under the queue lock). On an error, take the
        call out of the queue (or break the queue) and raise."""

    def dead_rank(self) -> int | None: ...

    def fail(self, rank: int) -> WorkerDiedError: ...

    def close(self) -> None: ...


class GroupExecutor:
    """``collective_rpc`` and the rest of SPEC.md's API over a ``WorkerGroup``."""

    def __init__(self, config: ExecutorConfig, make_group: Callable[[], WorkerGroup]) -> None:
        kind = type(self).__name__
        if not isinstance(config, ExecutorConfig):
            raise TypeError(f"{kind} needs an ExecutorConfig, got {config!r}")
        if config.world_size < 1:  # a config built around its own validation
            raise ValueError(f"{kind}: world_size must be >= 1, got {config.world_size!r}")
        self.config = config
        self.world_size = config.world_size
        self._group = make_group()
        self._finalizer = weakref.finalize(self, self._group.close)
        try:
            self._group.start()
        except BaseException:
            self._finalizer()
            raise

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        non_block: bool = False,
        unique_reply_rank: int | None = None,
    ) -> Any:
        group = self._group
        name = method_name(method)
        if group.closed:
            raise ExecutorShutdownError(f"collective_rpc({name!r}): the executor was shut down")
        args = validate_call(method, timeout, args, kwargs, unique_reply_rank, self.world_size)
        if group.failure.error is not None:
            raise group.failure.error
        try:
            body = dumps_call((method, args, kwargs, unique_reply_rank))
        except Exception as exc:
            raise SerializationError(f"collective_rpc({name!r}): the call could not be pickled: {exc}") from exc
        queue = group.queue
        with queue.lock:
            call = queue.new_call(name, self.world_size, unique_reply_rank, timeout, future=non_block)
            future = call.future  # a call settled at once lets go of its future (futures._settle)
            group.send(call, body)
        if non_block:
            return future
        return queue.wait(call)

    def check_health(self) -> None:
        group = self._group
        if group.closed:
            raise ExecutorShutdownError("check_health(): the executor was shut down")
        if group.failure.error is None:
            rank = group.dead_rank()
            if rank is not None:
                group.fail(rank)
        if group.failure.error is not None:
            raise group.failure.error

    def register_failure_callback(self, callback: Callable[[], None]) -> None:
        if not callable(callback):
            raise TypeError(f"register_failure_callback: {callback!r} is not callable")
        self._group.failure.add_callback(callback)

    def shutdown(self) -> None:
        self._finalizer()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def worker_pids(self) -> list[int | None]:
        return list(self._group.pids)
