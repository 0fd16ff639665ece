"""The executor contract of docs/SPEC.md: the config, the protocol, the errors, the clause ids.

Everything a backend and the conformance suite agree on lives here and nowhere
else, so a backend written elsewhere needs this module alone.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = [
    "CLAUSES",
    "DEVICES",
    "FAIL_INIT_ENV",
    "SPEC_VERSION",
    "START_METHODS",
    "Backend",
    "Executor",
    "ExecutorConfig",
    "ExecutorError",
    "ExecutorShutdownError",
    "RPCTimeoutError",
    "RemoteCallError",
    "SerializationError",
    "WorkerDiedError",
    "WorkerInitError",
    "declare",
]

#: The version of the contract (docs/SPEC.md) this suite checks: its date of change.
SPEC_VERSION = "2026-12-07.2"

#: ``HARNESS_FAIL_WORKER_INIT=<rank>`` in a worker's environment makes that rank
#: raise during start-up (C22): how the suite asks a backend to fail one rank.
FAIL_INIT_ENV = "HARNESS_FAIL_WORKER_INIT"

#: The documents an installed harness carries, by name, with where each is in
#: the source tree (setup.py copies them into harness/_docs/): the contract, the
#: implementers' guide, and the example backend the guide walks through.
SHIPPED_SOURCES = {
    "SPEC.md": "docs/SPEC.md",
    "implementers.md": "docs/implementers.md",
    "pipes.py": "examples/pipes.py",
}
SHIPPED_DOCS = tuple(SHIPPED_SOURCES)


def doc_path(name: str) -> Path:
    """Where ``name`` (one of :data:`SHIPPED_DOCS`) is on this machine: inside the
    installed package, or in the checkout for an editable install."""
    if name not in SHIPPED_SOURCES:
        raise ValueError(f"unknown document {name!r}: expected one of {', '.join(SHIPPED_DOCS)}")
    package = Path(__file__).resolve().parent
    for candidate in (package / "_docs" / name, package.parent / SHIPPED_SOURCES[name]):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{name} is not installed with harness (looked in {package / '_docs'})")


DEVICES = ("cpu", "cuda")
START_METHODS = ("spawn", "fork", "forkserver")
DIST_BACKENDS = ("gloo", "nccl", "mpi", "ucc")

#: Clause id -> one-line summary, as in SPEC.md. Ids are stable.
CLAUSES: Mapping[str, str] = MappingProxyType(
    {
        "C1": "blocking call returns one entry per rank, in rank order",
        "C2": "unique_reply_rank returns that rank's result alone; out of range is ValueError",
        "C3": "args and kwargs reach the worker unchanged",
        "C4": "non_block returns one future resolving to the blocking result",
        "C5": "futures complete in submission order; hundreds in flight",
        "C6": "a worker exception fails that call only, with its message",
        "C7": "timeout raises TimeoutError; no late reply reaches a later call",
        "C8": "a dead worker (mid-call, idle or mid-collective) fails pending and later calls; callbacks run once",
        "C9": "shutdown is bounded (even with a worker hung in native code), reaps everything, is idempotent",
        "C10": "create/shutdown cycles work and leak nothing; nothing of a completed call is kept",
        "C11": "the context manager shuts down, also on error",
        "C12": "dropping the last reference stops the workers (gc_shutdown)",
        "C13": "workers exit when the caller is SIGKILLed, even with calls in flight",
        "C14": "worker.rank equals the process-group rank; one process per rank",
        "C15": "collectives are correct",
        "C16": "tensor- and pipeline-parallel models match the dense one; pipelined steps in flight resolve in order",
        "C17": "payloads of tens of MiB round-trip intact",
        "C18": "two executors in one process are independent",
        "C19": "an idle executor burns no caller CPU",
        "C20": "bad input gets a clear error and leaves the executor usable",
        "C21": "add_done_callback runs with the completed future",
        "C22": "start-up failure raises in time and leaves nothing (init_failure_injection)",
        "C23": "nothing listens beyond loopback; shared memory is mode 0600",
        "C24": "concurrent callers each get their own results, in order (concurrent_callers)",
        "C25": "idle workers sleep: under 5 % of a core each, 3 s after the last call",
    }
)


class FrozenEnv(Mapping[str, str]):
    """An immutable, hashable, picklable str -> str mapping (``ExecutorConfig.env``)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items = dict(items or {})

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(other) == self._items

    def __repr__(self) -> str:
        return repr(self._items)

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenEnv, (self._items,))


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True)
class ExecutorConfig:
    """What a backend factory is given. Validated on construction."""

    world_size: int
    device: str = "cpu"
    dist_backend: str = "gloo"
    start_method: str = "spawn"
    env: Mapping[str, str] = field(default_factory=dict)
    init_timeout_s: float = 120.0
    #: The machines the ranks span: world_size / nodes ranks on each, node by
    #: node (rank r on node r // (world_size / nodes)), as vLLM lays out tensor
    #: parallelism inside a node. 1: every rank on the caller's machine.
    nodes: int = 1

    def __post_init__(self) -> None:
        ws = self.world_size
        _check(
            isinstance(ws, int) and not isinstance(ws, bool) and ws >= 1,
            f"ExecutorConfig.world_size must be an int >= 1, got {ws!r}",
        )
        k = self.nodes
        _check(
            isinstance(k, int) and not isinstance(k, bool) and k >= 1,
            f"ExecutorConfig.nodes must be an int >= 1, got {k!r}",
        )
        _check(
            ws % k == 0,
            f"ExecutorConfig.nodes must divide world_size (the same number of ranks on every node), "
            f"got nodes={k!r} with world_size={ws!r}",
        )
        _check(
            self.device in DEVICES,
            f"ExecutorConfig.device must be one of {DEVICES}, got {self.device!r}",
        )
        _check(
            self.dist_backend in DIST_BACKENDS,
            f"ExecutorConfig.dist_backend must be one of {DIST_BACKENDS}, got {self.dist_backend!r}",
        )
        _check(
            self.start_method in START_METHODS,
            f"ExecutorConfig.start_method must be one of {START_METHODS}, got {self.start_method!r}",
        )
        _check(
            isinstance(self.init_timeout_s, (int, float))
            and not isinstance(self.init_timeout_s, bool)
            and self.init_timeout_s > 0,
            f"ExecutorConfig.init_timeout_s must be a number > 0, got {self.init_timeout_s!r}",
        )
        for key, value in dict(self.env).items():
            _check(
                isinstance(key, str) and isinstance(value, str),
                f"ExecutorConfig.env must map str to str, got {key!r}: {value!r}",
            )
        # Frozen, hashable and picklable: an immutable copy the caller cannot mutate.
        object.__setattr__(self, "env", FrozenEnv(self.env))


@runtime_checkable
class Executor(Protocol):
    """What every backend returns. See SPEC.md, "The API under test"."""

    world_size: int

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        non_block: bool = False,
        unique_reply_rank: int | None = None,
    ) -> Any: ...

    def check_health(self) -> None: ...

    def register_failure_callback(self, callback: Callable[[], None]) -> None: ...

    def shutdown(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc: object) -> None: ...


Backend = Callable[[ExecutorConfig], Executor]


def method_name(method: str | Callable[..., Any]) -> str:
    """How errors name a method: the string itself or the callable's qualified name."""
    if isinstance(method, str):
        return method
    return getattr(method, "__qualname__", None) or repr(method)


class ExecutorError(RuntimeError):
    """Base of every error an executor of this package raises."""


class ExecutorShutdownError(ExecutorError):
    """The executor was shut down; no further call is accepted."""


class WorkerDiedError(ExecutorError):
    """A worker process exited while the executor was in use."""

    def __init__(self, rank: int, pid: int | None, exitcode: int | None, detail: str = "") -> None:
        self.rank = rank
        self.pid = pid
        self.exitcode = exitcode
        msg = f"rank {rank}: worker process (pid {pid}) died with exit code {exitcode}"
        super().__init__(msg + (f"; {detail}" if detail else ""))


class WorkerInitError(ExecutorError):
    """A worker failed to start; construction of the executor failed."""


class RemoteCallError(ExecutorError):
    """A worker raised inside a call. Carries the rank, method and the remote traceback."""

    def __init__(self, rank: int, method: str, exc_type: str, message: str, remote_traceback: str) -> None:
        self.rank = rank
        self.method = method
        self.exc_type = exc_type
        self.remote_message = message
        self.remote_traceback = remote_traceback
        super().__init__(
            f"rank {rank}: collective_rpc({method!r}) raised {exc_type}: {message}\n"
            f"--- remote traceback (rank {rank}) ---\n{remote_traceback}"
        )


class RPCTimeoutError(ExecutorError, TimeoutError):
    """A call did not complete in time. Is a builtin ``TimeoutError``."""


class SerializationError(ExecutorError):
    """An argument or result could not be pickled."""


if not issubclass(TimeoutError, concurrent.futures.TimeoutError):  # pragma: no cover - Python 3.10
    RPCTimeoutError.__bases__ = (ExecutorError, TimeoutError, concurrent.futures.TimeoutError)


#: The declarations a backend's factory may carry, as attributes that
#: ``harness.backends.load_backend`` reads and checks (docs/implementers.md,
#: "Every declaration").
DECLARATIONS = (
    "unsupported",
    "world_sizes",
    "start_methods",
    "nodes",
    "session",
    "preload",
    "expected_failures",
    "version",
)

_Factory = TypeVar("_Factory", bound=Callable[..., Any])


def declare(
    factory: _Factory,
    *,
    unsupported: Mapping[str, str] | None = None,
    world_sizes: Sequence[int] | None = None,
    start_methods: Sequence[str] | None = None,
    nodes: Sequence[int] | None = None,
    session: Callable[[], Any] | None = None,
    preload: Sequence[str] | None = None,
    expected_failures: str | os.PathLike[str] | None = None,
    version: str | Callable[[], str] | None = None,
) -> _Factory:
    """Give ``factory`` the declarations named (each an attribute the loader
    reads and checks; one left out keeps its default) and return it: the typed
    form of ``factory.unsupported = {...}``."""
    given = {
        "unsupported": unsupported,
        "world_sizes": tuple(world_sizes) if world_sizes is not None else None,
        "start_methods": tuple(start_methods) if start_methods is not None else None,
        "nodes": tuple(nodes) if nodes is not None else None,
        "session": session,
        "preload": tuple(preload) if preload is not None else None,
        "expected_failures": expected_failures,
        "version": version,
    }
    for name, value in given.items():
        if value is not None:
            setattr(factory, name, value)
    return factory
