"""harness: a conformance and verification suite for distributed inference executors.

The public API: the contract of docs/SPEC.md and backend loading.
"""

from harness._stacks import register_from_env as register_stacks
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
)

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
    "load_backend",
    "register_stacks",
]

__version__ = "0.1.0"
