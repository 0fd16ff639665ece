"""harness: a conformance and verification suite for distributed inference executors.

The public API: the contract of docs/SPEC.md, backend loading, and
:func:`register_stacks` for the workers of a third-party backend.

It may import the loader (``harness.backends``), ``harness.contract`` and
``harness.system``; the suite, the plugin, the report, perf and the command
line stand above it (docs/layout.md).
"""

from harness.backends import BackendUnavailableError, LoadedBackend, available_backends, load_backend
from harness.contract import (
    CLAUSES,
    Backend,
    Executor,
    ExecutorConfig,
    ExecutorError,
    ExecutorShutdownError,
    RemoteCallError,
    RPCTimeoutError,
    SerializationError,
    WorkerDiedError,
    WorkerInitError,
    declare,
)
from harness.system.stacks import register_from_env as _register_stacks_from_env

__all__ = [
    "CLAUSES",
    "Backend",
    "BackendUnavailableError",
    "Executor",
    "ExecutorConfig",
    "ExecutorError",
    "ExecutorShutdownError",
    "LoadedBackend",
    "RPCTimeoutError",
    "RemoteCallError",
    "SerializationError",
    "WorkerDiedError",
    "WorkerInitError",
    "available_backends",
    "declare",
    "load_backend",
    "register_stacks",
]

__version__ = "0.1.0"


def register_stacks() -> None:
    """In a worker process of a third-party backend: dump this process's stacks on
    SIGUSR1 into the folder the suite names in HARNESS_STACKS_DIR, so they reach
    the report at a timeout."""
    _register_stacks_from_env()
