"""``uni``: world size 1, the worker in the caller's process.

Calls run synchronously on the caller's thread, as vLLM's ``UniProcExecutor``
does: ``non_block=True`` returns an already completed future. Because a running
call cannot be interrupted, a timeout cannot cut a slow call short (C7), and a
hung call hangs the caller before ``shutdown`` can run (C9); and the worker's
default process group is the caller's, of which a process has one (C18). These
are declared in ``create.unsupported``.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable
from typing import Any

from harness.contract import (
    ExecutorConfig,
    ExecutorShutdownError,
    RemoteCallError,
    SerializationError,
    WorkerInitError,
    declare,
    method_name,
)
from harness.executors._validate import validate_call
from harness.executors.futures import Reply
from harness.executors.mp.worker import Request, Worker, error_reply, init_distributed, run_call
from harness.system.environ import environ

__all__ = ["UniprocExecutor", "create"]


class _Resources:
    def __init__(self) -> None:
        self.tmpdir = tempfile.mkdtemp(prefix="harness-uni-")
        self.owns_group = False
        self.closed = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


class UniprocExecutor:
    def __init__(self, config: ExecutorConfig) -> None:
        if not isinstance(config, ExecutorConfig):
            raise TypeError(f"UniprocExecutor needs an ExecutorConfig, got {config!r}")
        if config.world_size != 1:  # also catches a world_size < 1 slipped past ExecutorConfig
            raise ValueError(f"the 'uni' backend runs world_size 1 only, got world_size={config.world_size}")
        self.config = config
        self.world_size = 1
        self._res = _Resources()
        self._finalizer = weakref.finalize(self, self._res.close)
        self._lock = threading.Lock()
        self._call_id = 0
        with environ(config.env):
            try:
                import torch.distributed as dist

                if dist.is_initialized():
                    raise WorkerInitError(
                        "rank 0: the caller's process already has a default process group; "
                        "the 'uni' backend needs its own (shut the other executor down first)"
                    )
                init_distributed(
                    0,
                    1,
                    config.device,
                    config.dist_backend,
                    os.path.join(self._res.tmpdir, "store"),
                    config.init_timeout_s,
                )
                self._res.owns_group = True
            except WorkerInitError:
                self._finalizer()
                raise
            except BaseException as exc:
                self._finalizer()
                raise WorkerInitError(f"rank 0: worker failed to start: {exc}") from exc
        self._worker = Worker(0, 1, config.device)

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        non_block: bool = False,
        unique_reply_rank: int | None = None,
    ) -> Any:
        name = method_name(method)
        if self._res.closed:
            raise ExecutorShutdownError(f"collective_rpc({name!r}): the executor was shut down")
        args = validate_call(method, timeout, args, kwargs, unique_reply_rank, 1)
        # Same isolation as a worker process: the worker gets copies, and an
        # unpicklable argument or result fails here as it would there (C20).
        try:
            request = Request(*pickle.loads(pickle.dumps((method, args, kwargs, unique_reply_rank))))
        except Exception as exc:
            raise SerializationError(f"collective_rpc({name!r}): the call could not be pickled: {exc}") from exc
        with self._lock:
            self._call_id += 1
            reply = run_call(self._worker, self._call_id, request)
        if reply.error is None:
            try:
                reply = Reply(*pickle.loads(pickle.dumps(tuple(reply))))
            except Exception as exc:  # noqa: BLE001
                err = RuntimeError(f"result of type {type(reply.value).__qualname__} could not be pickled: {exc}")
                reply = error_reply(0, reply.call_id, err)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if reply.error is not None:
            future.set_exception(RemoteCallError(0, name, *reply.error))
        else:
            future.set_result(reply.value if unique_reply_rank is not None else [reply.value])
        return future if non_block else future.result()

    def check_health(self) -> None:
        if self._res.closed:
            raise ExecutorShutdownError("check_health(): the executor was shut down")

    def register_failure_callback(self, callback: Callable[[], None]) -> None:
        # The worker lives and dies with the caller: no failure can be observed.
        if not callable(callback):
            raise TypeError(f"register_failure_callback: {callback!r} is not callable")

    def shutdown(self) -> None:
        self._finalizer()

    def __enter__(self) -> UniprocExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def create(config: ExecutorConfig) -> UniprocExecutor:
    """The ``uni`` backend factory."""
    return UniprocExecutor(config)


declare(
    create,
    world_sizes=(1,),
    start_methods=("spawn",),  # starts no process: one variant is enough
    unsupported={
        "C7": "calls run on the caller's thread and cannot be interrupted by a timeout",
        "C8": "the worker is the caller's own process: it cannot die apart from the caller",
        "C9": "a hung call hangs the caller's thread, so shutdown cannot bound it",
        "C18": "the worker's process group is the caller's default group, one per process",
    },
)
