"""The plugin's settings and the variants they select.

Each setting comes from the command line, else the environment, else the ini
file, else its default, and a bad value is a usage error naming the value and
where it came from. A variant is one backend at one world size and start
method: every test that uses the ``backend`` fixture runs once per variant.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from harness.backends import BackendUnavailableError, LoadedBackend, load_backend
from harness.contract import CLAUSES, START_METHODS

__all__ = [
    "Options",
    "Unavailable",
    "Variant",
    "add_options",
    "clauses_of",
    "parametrize",
    "parse_options",
    "variant_of",
]

_DEFAULT_WORLD_SIZES = "1,2,4"
_DEFAULT_TIMEOUT_S = 300.0

HELP_BACKEND = (
    "backends under test, comma-separated: built-in names (uni, mp, ray, ...), "
    "'module:attr' factories, or harness.backends entry points"
)
HELP_WORLD_SIZE = "world sizes to run, comma-separated (default 1,2,4; each backend keeps those it supports)"
HELP_BACKEND_WORLD_SIZES = (
    "world sizes for particular backends, e.g. 'ray=2' or 'ray=2,4; mp=1,2' (ini only); "
    "used when no world size is given on the command line or in HARNESS_WORLD_SIZE"
)
HELP_START_METHOD = "start methods to run, comma-separated (default: every one a backend supports)"
HELP_DECLARE = "clauses to treat as declared unsupported for every backend, comma-separated (e.g. C12,C22)"
HELP_TIMEOUT = "seconds after which an isolated test is killed with its process group (default 300)"
HELP_ISOLATE = "run each (test, backend) pair in a fresh forked process (default on; 'no' to run in-process)"

HELP_REQUIRE_GPUS = (
    "fail, instead of skipping, GPU tests that need at most N GPUs when the machine has fewer "
    "(a GPU runner that lost its GPUs must not read green)"
)


@dataclass(frozen=True)
class Variant:
    """One parametrisation: a backend at a world size and start method."""

    backend: LoadedBackend
    world_size: int
    start_method: str

    @property
    def id(self) -> str:
        return f"{self.backend.name}-ws{self.world_size}-{self.start_method}"


@dataclass(frozen=True)
class Unavailable:
    """The parameter of a selected backend that cannot load here (its optional
    dependency is missing): its tests are skipped, and reported "not run"."""

    name: str
    reason: str
    world_size: int

    @property
    def id(self) -> str:
        return f"{self.name}-ws{self.world_size}"


@dataclass
class Options:
    backends: list[str]
    world_sizes: list[int]
    start_methods: list[str]
    declared: dict[str, str]
    timeout_s: float
    isolate: bool
    loaded: dict[str, LoadedBackend | BaseException]
    timeout_explicit: bool = False
    backend_world_sizes: dict[str, list[int]] = field(default_factory=dict)
    require_gpus: int = 0

    def world_sizes_of(self, backend: str) -> list[int]:
        return self.backend_world_sizes.get(backend, self.world_sizes)


def add_options(parser: pytest.Parser) -> None:
    """Register the harness options and their ini twins."""
    group = parser.getgroup("harness", "executor conformance")
    group.addoption("--backend", dest="harness_backend", default=None, help=HELP_BACKEND)
    group.addoption("--world-size", dest="harness_world_size", default=None, help=HELP_WORLD_SIZE)
    group.addoption("--start-method", dest="harness_start_method", default=None, help=HELP_START_METHOD)
    group.addoption("--declare", dest="harness_declare", default=None, help=HELP_DECLARE)
    group.addoption("--harness-timeout", dest="harness_timeout", default=None, help=HELP_TIMEOUT)
    group.addoption("--isolate", dest="harness_isolate", default=None, help=HELP_ISOLATE)
    group.addoption("--require-gpus", dest="harness_require_gpus", default=None, help=HELP_REQUIRE_GPUS)
    group.addoption("--report-json", dest="harness_report_json", default=None, help="write the clause matrix as JSON")
    group.addoption("--report-md", dest="harness_report_md", default=None, help="write the clause matrix as Markdown")
    parser.addini("harness_backends", HELP_BACKEND, default="")
    parser.addini("harness_world_sizes", HELP_WORLD_SIZE, default="")
    parser.addini("harness_backend_world_sizes", HELP_BACKEND_WORLD_SIZES, default="")
    parser.addini("harness_start_methods", HELP_START_METHOD, default="")
    parser.addini("harness_timeout", HELP_TIMEOUT, default="")


def _setting(config: pytest.Config, option: str, env: str, ini: str, default: str) -> tuple[str, str]:
    """Command line > environment > ini > default, with where the value came from."""
    value = config.getoption(option)
    if value is not None:
        return str(value), "the command line"
    if os.environ.get(env):
        return os.environ[env], f"the environment variable {env}"
    if ini and config.getini(ini):
        return str(config.getini(ini)), f"the ini setting {ini}"
    return default, "the default"


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_options(config: pytest.Config) -> Options:
    backends, _ = _setting(config, "harness_backend", "HARNESS_BACKEND", "harness_backends", "")
    ws_text, ws_where = _setting(
        config, "harness_world_size", "HARNESS_WORLD_SIZE", "harness_world_sizes", _DEFAULT_WORLD_SIZES
    )
    sm_text, sm_where = _setting(
        config, "harness_start_method", "HARNESS_START_METHOD", "harness_start_methods", ",".join(START_METHODS)
    )
    to_text, to_where = _setting(
        config, "harness_timeout", "HARNESS_TIMEOUT", "harness_timeout", str(_DEFAULT_TIMEOUT_S)
    )
    world_sizes = _world_sizes(ws_text, ws_where)
    per_backend: dict[str, list[int]] = {}
    if ws_where in ("the ini setting harness_world_sizes", "the default"):
        where = "the ini setting harness_backend_world_sizes"
        for entry in [e.strip() for e in str(config.getini("harness_backend_world_sizes")).split(";") if e.strip()]:
            name, eq, sizes = entry.partition("=")
            if not eq or not name.strip():
                raise pytest.UsageError(f"Invalid entry {entry!r} from {where}: expected NAME=WS[,WS...]")
            per_backend[name.strip()] = _world_sizes(sizes, where)
    start_methods = _split(sm_text)
    for sm in start_methods:
        if sm not in START_METHODS:
            raise pytest.UsageError(f"Invalid start method {sm!r} from {sm_where}: expected one of {START_METHODS}")
    try:
        timeout_s = float(to_text)
        if timeout_s <= 0:
            raise ValueError
    except ValueError:
        raise pytest.UsageError(f"Invalid timeout {to_text!r} from {to_where}: expected seconds > 0") from None
    declared = {}
    for clause in _split(config.getoption("harness_declare") or ""):
        if clause not in CLAUSES:
            raise pytest.UsageError(f"Invalid clause {clause!r} from --declare: expected C1..C{len(CLAUSES)}")
        declared[clause] = "declared unsupported with --declare"
    gpus_text, gpus_where = _setting(config, "harness_require_gpus", "HARNESS_REQUIRE_GPUS", "", "0")
    if not gpus_text.strip().isdigit():
        raise pytest.UsageError(f"Invalid GPU count {gpus_text!r} from {gpus_where}: expected an integer >= 0")
    isolate_text = (config.getoption("harness_isolate") or "yes").lower()
    if isolate_text not in ("yes", "no"):
        raise pytest.UsageError(f"Invalid --isolate {isolate_text!r} from the command line: expected yes or no")
    return Options(
        _split(backends),
        world_sizes,
        start_methods,
        declared,
        timeout_s,
        isolate_text == "yes",
        {},
        timeout_explicit=to_where != "the default",
        backend_world_sizes=per_backend,
        require_gpus=int(gpus_text),
    )


def _world_sizes(text: str, where: str) -> list[int]:
    out = []
    for v in _split(text):
        if not v.isdigit() or int(v) < 1:
            raise pytest.UsageError(f"Invalid world size {v!r} from {where}: expected integers >= 1")
        out.append(int(v))
    return out


def load(opts: Options, name: str) -> LoadedBackend | BaseException:
    if name not in opts.loaded:
        try:
            opts.loaded[name] = load_backend(name, opts.declared)
        except (ImportError, ValueError, TypeError) as exc:
            opts.loaded[name] = exc
    return opts.loaded[name]


def parametrize(metafunc: pytest.Metafunc, opts: Options) -> None:
    """Parametrise a test that uses ``backend`` over the selected variants."""
    if not opts.backends:
        raise pytest.UsageError(
            "no backend to test: pass --backend NAME (e.g. --backend mp), set HARNESS_BACKEND, "
            "or the ini setting harness_backends"
        )
    params = []
    for name in opts.backends:
        loaded = load(opts, name)
        if isinstance(loaded, BaseException):
            reason = f"backend {name!r} unavailable: {loaded}"
            mark = pytest.mark.skip(reason=reason) if isinstance(loaded, BackendUnavailableError) else None
            if mark is None:
                raise pytest.UsageError(reason)
            for ws in opts.world_sizes_of(name):
                u = Unavailable(name, reason, ws)
                params.append(pytest.param(u, id=u.id, marks=mark))
            continue
        starts = [s for s in opts.start_methods if s in (loaded.start_methods or START_METHODS)]
        for ws in opts.world_sizes_of(name):
            if not loaded.supports_world_size(ws):
                continue
            for sm in starts:
                v = Variant(loaded, ws, sm)
                params.append(pytest.param(v, id=v.id))
    metafunc.parametrize("harness_variant", params, indirect=True)


def clauses_of(item: pytest.Item) -> list[str]:
    """The clause ids a test's ``clause`` markers name."""
    return [c for m in item.iter_markers("clause") for c in m.args]


def variant_of(item: pytest.Item) -> Variant | Unavailable | None:
    """The variant a test runs for, if it is a backend test."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    v = callspec.params.get("harness_variant")
    return v if isinstance(v, (Variant, Unavailable)) else None
