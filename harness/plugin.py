"""The pytest plugin: backends as parameters, isolation, leak checks, the clause report.

Loaded through the ``pytest11`` entry point. For every test that uses the
``backend`` fixture (all of ``harness.conformance``):

- it is parametrised over the selected backends, world sizes and start methods
  (``--backend``, ``--world-size``, ``--start-method``);
- it runs in a fresh forked process that leads its own process group, so one
  backend's leftovers never reach the next test; past its timeout the whole
  group is killed, the stacks it dumped are attached, the test is reported
  failed, and the run goes on;
- a clause the backend declares unsupported is skipped with its reason;
- its outcome lands in the clause x backend matrix printed at the end.

The pytest parent never imports torch's CUDA nor starts a worker.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from harness.backends import BUILTIN_BACKENDS, BackendUnavailableError, LoadedBackend, load_backend, module_installed
from harness.contract import CLAUSES, START_METHODS, Executor, ExecutorConfig
from harness.report import ClauseMatrix, machine_settings

__all__ = ["Variant"]

HELP_BACKEND = (
    "backends under test, comma-separated: built-in names (uni, mp, ray, ...), "
    "'module:attr' factories, or harness.backends entry points"
)
HELP_WORLD_SIZE = "world sizes to run, comma-separated (default 1,2,4; each backend keeps those it supports)"
HELP_BACKEND_WORLD_SIZES = (
    "world sizes for particular backends, e.g. 'ray=2' or 'ray=2,4; mp=1,2' (ini only); "
    "used when no world size is given on the command line or in HARNESS_WORLD_SIZE"
)
HELP_START_METHOD = "start methods to run, comma-separated (default spawn,fork)"
HELP_DECLARE = "clauses to treat as declared unsupported for every backend, comma-separated (e.g. C12,C22)"
HELP_TIMEOUT = "seconds after which an isolated test is killed with its process group (default 300)"
HELP_ISOLATE = "run each (test, backend) pair in a fresh forked process (default on; 'no' to run in-process)"

_DEFAULT_WORLD_SIZES = "1,2,4"
_DEFAULT_TIMEOUT_S = 300.0

matrix_key = pytest.StashKey[ClauseMatrix]()
options_key = pytest.StashKey["_Options"]()
sessions_key = pytest.StashKey["_Sessions"]()


class _Sessions:
    """The backends' run-wide resources (``LoadedBackend.session``, e.g. a Ray
    cluster): each entered once, in this (the pytest) process, before the first
    test of its backend runs, and left when the run ends."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._env: dict[str, Mapping[str, str] | BaseException] = {}
        self._owner = os.getpid()

    def ensure(self, backend: LoadedBackend) -> None:
        if backend.session is None or backend.name in self._env or os.getpid() != self._owner:
            return
        try:
            env = self._stack.enter_context(backend.session())
            self._env[backend.name] = dict(env or {})
        except Exception as exc:  # noqa: BLE001 - its tests fail with it; the run goes on
            self._env[backend.name] = exc

    def env(self, backend: LoadedBackend) -> Mapping[str, str]:
        """The environment for a test of ``backend``; fails the test if its session did not start."""
        self.ensure(backend)
        env = self._env.get(backend.name, {})
        if isinstance(env, BaseException):
            pytest.fail(f"backend {backend.name!r}: its run-wide session could not start: {env}", pytrace=False)
        return env

    def close(self) -> None:
        if os.getpid() == self._owner:
            self._stack.close()


@dataclass(frozen=True)
class Variant:
    """One parametrisation: a backend at a world size and start method."""

    backend: LoadedBackend
    world_size: int
    start_method: str

    @property
    def id(self) -> str:
        return f"{self.backend.name}-ws{self.world_size}-{self.start_method}"


@dataclass
class _Options:
    backends: list[str]
    world_sizes: list[int]
    start_methods: list[str]
    declared: dict[str, str]
    timeout_s: float
    isolate: bool
    loaded: dict[str, LoadedBackend | BaseException]
    timeout_explicit: bool = False
    backend_world_sizes: dict[str, list[int]] = field(default_factory=dict)

    def world_sizes_of(self, backend: str) -> list[int]:
        return self.backend_world_sizes.get(backend, self.world_sizes)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the harness options and their ini twins."""
    group = parser.getgroup("harness", "executor conformance")
    group.addoption("--backend", dest="harness_backend", default=None, help=HELP_BACKEND)
    group.addoption("--world-size", dest="harness_world_size", default=None, help=HELP_WORLD_SIZE)
    group.addoption("--start-method", dest="harness_start_method", default=None, help=HELP_START_METHOD)
    group.addoption("--declare", dest="harness_declare", default=None, help=HELP_DECLARE)
    group.addoption("--harness-timeout", dest="harness_timeout", default=None, help=HELP_TIMEOUT)
    group.addoption("--isolate", dest="harness_isolate", default=None, help=HELP_ISOLATE)
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


def _parse_options(config: pytest.Config) -> _Options:
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
    isolate_text = (config.getoption("harness_isolate") or "yes").lower()
    if isolate_text not in ("yes", "no"):
        raise pytest.UsageError(f"Invalid --isolate {isolate_text!r} from the command line: expected yes or no")
    return _Options(
        _split(backends),
        world_sizes,
        start_methods,
        declared,
        timeout_s,
        isolate_text == "yes",
        {},
        timeout_explicit=to_where != "the default",
        backend_world_sizes=per_backend,
    )


def _world_sizes(text: str, where: str) -> list[int]:
    out = []
    for v in _split(text):
        if not v.isdigit() or int(v) < 1:
            raise pytest.UsageError(f"Invalid world size {v!r} from {where}: expected integers >= 1")
        out.append(int(v))
    return out


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers; parse and check the harness settings."""
    config.addinivalue_line(
        "markers", "gpu(min_gpus=N): needs N CUDA GPUs (default: one per rank); skips with the count found"
    )
    config.addinivalue_line("markers", "distributed: starts workers; runs once per backend, in its own process")
    config.addinivalue_line("markers", "ray: needs Ray; skips with the install command where it is missing")
    config.addinivalue_line("markers", "perf: compares latency with a stored baseline")
    config.addinivalue_line("markers", "clause(*ids): the SPEC.md clauses this test checks")
    config.stash[options_key] = _parse_options(config)
    matrix = ClauseMatrix()
    opts = config.stash[options_key]
    matrix.settings = machine_settings(
        {
            "backends": ",".join(opts.backends) or "(none)",
            "world sizes": opts.world_sizes,
            **({"world sizes by backend": opts.backend_world_sizes} if opts.backend_world_sizes else {}),
            "start methods": opts.start_methods,
        }
    )
    config.stash[matrix_key] = matrix
    config.stash[sessions_key] = _Sessions()
    config.pluginmanager.register(_MatrixCollector(matrix), "harness-matrix")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave the backends' run-wide sessions."""
    sessions = config.stash.get(sessions_key, None)
    if sessions is not None:
        sessions.close()


def _load(opts: _Options, name: str) -> LoadedBackend | BaseException:
    if name not in opts.loaded:
        try:
            opts.loaded[name] = load_backend(name, opts.declared)
        except (ImportError, ValueError, TypeError) as exc:
            opts.loaded[name] = exc
    return opts.loaded[name]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise every test that uses ``backend`` over the selected variants."""
    if "harness_variant" not in metafunc.fixturenames:
        return
    opts = metafunc.config.stash[options_key]
    if not opts.backends:
        raise pytest.UsageError(
            "no backend to test: pass --backend NAME (e.g. --backend mp), set HARNESS_BACKEND, "
            "or the ini setting harness_backends"
        )
    params = []
    for name in opts.backends:
        loaded = _load(opts, name)
        if isinstance(loaded, BaseException):
            reason = f"backend {name!r} unavailable: {loaded}"
            mark = pytest.mark.skip(reason=reason) if isinstance(loaded, BackendUnavailableError) else None
            if mark is None:
                raise pytest.UsageError(reason)
            params.append(pytest.param(None, id=name, marks=mark))
            continue
        starts = [s for s in opts.start_methods if s in (loaded.start_methods or START_METHODS)]
        for ws in opts.world_sizes_of(name):
            if not loaded.supports_world_size(ws):
                continue
            for sm in starts:
                v = Variant(loaded, ws, sm)
                params.append(pytest.param(v, id=v.id))
    metafunc.parametrize("harness_variant", params, indirect=True)


@pytest.fixture
def harness_variant(request: pytest.FixtureRequest) -> Variant:
    variant: Variant = request.param
    return variant


@pytest.fixture
def backend(harness_variant: Variant, request: pytest.FixtureRequest) -> Iterator[LoadedBackend]:
    """The backend under test (factory plus its declarations), with its
    run-wide session's environment set for the test."""
    loaded = harness_variant.backend
    env = request.config.stash[sessions_key].env(loaded)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield loaded


@pytest.fixture
def world_size(harness_variant: Variant) -> int:
    return harness_variant.world_size


@pytest.fixture
def start_method(harness_variant: Variant) -> str:
    return harness_variant.start_method


@pytest.fixture
def executor_config(harness_variant: Variant) -> ExecutorConfig:
    return ExecutorConfig(world_size=harness_variant.world_size, start_method=harness_variant.start_method)


@pytest.fixture
def executor(backend: LoadedBackend, executor_config: ExecutorConfig) -> Iterator[Executor]:
    """An executor for this test; shut down after it, and checked for leaks."""
    from harness import leaks

    before = leaks.baseline()
    ex = backend.factory(executor_config)
    try:
        yield ex
    finally:
        ex.shutdown()
    # Processes, threads, shared memory, sockets; descriptors are C10's to judge.
    problems = leaks.wait_clean(before, timeout=10.0, fd_slack=None)
    if problems:
        pytest.fail(f"{backend.name}: the executor leaked after shutdown: " + "; ".join(problems), pytrace=False)


def gpu_count() -> int:
    """CUDA GPUs on this machine, found without initialising CUDA in this process."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    found = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    if visible is not None:
        found = min(found, len([v for v in visible.split(",") if v.strip()]))
    return found


def _clauses(item: pytest.Item) -> list[str]:
    return [c for m in item.iter_markers("clause") for c in m.args]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark backend tests distributed; skip GPU tests on machines with too few GPUs,
    and Ray tests where Ray is not installed."""
    found: int | None = None
    missing_ray = not module_installed("ray")
    for item in items:
        if missing_ray and item.get_closest_marker("ray") is not None:
            item.add_marker(
                pytest.mark.skip(reason=f"ray is not installed; install it with: {BUILTIN_BACKENDS['ray'][1]}")
            )
        if "harness_variant" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.distributed)
        for clause in _clauses(item):
            if clause not in CLAUSES:
                raise pytest.UsageError(f"{item.nodeid}: clause marker names unknown clause {clause!r}")
        gpu = item.get_closest_marker("gpu")
        if gpu is not None:
            variant = _variant_of(item)
            # Without min_gpus, a backend test needs one GPU per rank.
            default = variant.world_size if variant is not None else 1
            need = int(gpu.kwargs.get("min_gpus", gpu.args[0] if gpu.args else default))
            if found is None:
                found = gpu_count()
            if found < need:
                item.add_marker(pytest.mark.skip(reason=f"needs {need} GPU{'s' * (need > 1)}, found {found}"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tag the report with clause and backend; skip clauses the backend declares unsupported."""
    clauses = _clauses(item)
    variant = _variant_of(item)
    if not clauses or variant is None:
        return
    item.user_properties.append(("harness_clauses", ",".join(clauses)))
    item.user_properties.append(("harness_backend", variant.backend.name))
    item.user_properties.append(("harness_variant", variant.id))
    for clause in clauses:
        reason = variant.backend.declared(clause)
        if reason:
            item.user_properties.append(("harness_declared", reason))
            pytest.skip(f"{variant.backend.name} declares {clause} unsupported: {reason}")


def _variant_of(item: pytest.Item) -> Variant | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    v = callspec.params.get("harness_variant")
    return v if isinstance(v, Variant) else None


class _MatrixCollector:
    """Folds each test outcome into the clause matrix (a plugin object, so the
    report hook reaches the matrix without a global)."""

    def __init__(self, matrix: ClauseMatrix) -> None:
        self.matrix = matrix

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Fold one report into the matrix."""
        props = dict(report.user_properties)
        if "harness_clauses" not in props:
            return
        column = str(props["harness_backend"])
        for clause in str(props["harness_clauses"]).split(","):
            if report.failed:
                test = report.nodeid.split("::")[-1]
                self.matrix.add(clause, column, "FAIL", f"{props['harness_variant']}: {test}")
            elif report.skipped and report.when == "setup":
                if "harness_declared" in props:
                    self.matrix.add(clause, column, "declared", str(props["harness_declared"]))
                else:
                    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                    self.matrix.add(clause, column, "skipped", str(reason))
            elif report.passed and report.when == "call":
                self.matrix.add(clause, column, "pass")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Start the one resource tracker the forked tests share."""
    if session.config.stash[options_key].isolate:
        # One resource tracker for the whole run, started here: forked test
        # processes share it instead of each leaving one behind in its group.
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print the clause matrix; write JSON and Markdown when asked."""
    matrix = config.stash[matrix_key]
    if not matrix.cells:
        return
    terminalreporter.section("harness conformance: clause x backend")
    for key, value in matrix.settings.items():
        terminalreporter.write_line(f"{key}: {value}")
    terminalreporter.write_line("")
    terminalreporter.write_line(matrix.render_terminal())
    matrix.write(config.getoption("harness_report_json"), config.getoption("harness_report_md"))


# ---- isolation ---------------------------------------------------------------------


def _timeout_of(item: pytest.Item, opts: _Options) -> float:
    """--harness-timeout (or its env/ini twin) when given, else the test's
    timeout marker, else the default."""
    if opts.timeout_explicit:
        return opts.timeout_s
    marker = item.get_closest_marker("timeout")  # pytest-timeout's marker, if the test sets one
    if marker is not None and marker.args:
        return float(marker.args[0])
    return opts.timeout_s


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Run distributed tests in a forked child that leads its own process group."""
    opts = item.config.stash[options_key]
    variant = _variant_of(item)
    if variant is not None:
        # Here, before any fork: a session outlives the test processes.
        item.config.stash[sessions_key].ensure(variant.backend)
    if not opts.isolate or item.get_closest_marker("distributed") is None or not hasattr(os, "fork"):
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in _run_isolated(item, _timeout_of(item, opts)):
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _run_isolated(item: pytest.Item, timeout_s: float) -> list[pytest.TestReport]:
    from _pytest.runner import runtestprotocol

    config = item.config
    stacks = tempfile.NamedTemporaryFile(prefix="harness-stacks-", suffix=".txt", delete=False)  # noqa: SIM115
    stacks.close()
    # Reports travel through a file, not a pipe: a worker the test forked (and
    # leaked) would inherit a pipe's write end and hold it open past the test.
    results = tempfile.NamedTemporaryFile(prefix="harness-reports-", suffix=".json", delete=False)  # noqa: SIM115
    results.close()
    # pytest-timeout arms SIGALRM in this process for a test's timeout marker;
    # here the deadline is ours, and firing in the parent would end the run.
    hook = getattr(config.hook, "pytest_timeout_cancel_timer", None)
    if hook is not None:
        hook(item=item)
    # pytest's faulthandler_timeout keeps a watchdog thread armed around each
    # test. A forked child would inherit it armed but without its thread, and
    # deadlock the first time it is cancelled; our own timeout replaces it.
    faulthandler.cancel_dump_traceback_later()
    pid = os.fork()
    if pid == 0:  # the child: run the test, write the reports, never return into pytest
        code = 0
        try:
            os.setpgid(0, 0)
            with open(stacks.name, "w", encoding="utf-8") as dump:
                # The parent asks for the stacks with SIGUSR1 before it kills us.
                faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
                reports = runtestprotocol(item, log=False, nextitem=None)
            data = [config.hook.pytest_report_to_serializable(config=config, report=r) for r in reports]
            with open(results.name, "w", encoding="utf-8") as out:
                json.dump(data, out)
        except BaseException:  # noqa: BLE001 - report through the exit code; the parent explains
            code = 3
        finally:
            os._exit(code)
    status = _wait_child(pid, timeout_s)
    timed_out = status is None
    if timed_out:
        try:
            os.kill(pid, signal.SIGUSR1)
            time.sleep(1.0)  # time to write the stacks
        except ProcessLookupError:
            pass
        _kill_group(pid, settle_s=0)
        _, status = os.waitpid(pid, 0)
    leftover = _kill_group(pid)  # anything the test left in its group (workers) dies now
    with open(results.name, encoding="utf-8") as f:
        raw = f.read()
    os.unlink(results.name)
    with open(stacks.name, encoding="utf-8", errors="replace") as f:
        dumped = f.read()
    os.unlink(stacks.name)
    if timed_out:
        return [
            _synthetic(
                item,
                "call",
                f"timed out after {timeout_s:g} s: killed with its process group "
                f"(leftover processes: {leftover}).\nStacks at the timeout:\n{dumped}",
            )
        ]
    try:
        data = json.loads(raw)
        reports = [config.hook.pytest_report_from_serializable(config=config, data=d) for d in data]
        for report in reports:
            if isinstance(report.longrepr, list):  # a skip's (path, line, reason), listed by JSON
                report.longrepr = tuple(report.longrepr)
    except ValueError:
        return [_synthetic(item, "call", f"the test process died (status {status}) before reporting.\n{dumped}")]
    if leftover:
        reports.append(_synthetic(item, "teardown", f"processes left running after the test: {leftover}"))
    return reports


def _wait_child(pid: int, timeout_s: float) -> int | None:
    """The child's wait status once it exits, or None after ``timeout_s`` s."""
    deadline = time.monotonic() + timeout_s
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:  # Linux: a blocking wait with a timeout
        import select

        fd = pidfd_open(pid)
        try:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                return None
        finally:
            os.close(fd)
        return os.waitpid(pid, 0)[1]
    while True:  # elsewhere: no blocking wait with a timeout exists, so poll
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _kill_group(pgid: int, settle_s: float = 2.0) -> list[int]:
    """SIGKILL every process in the group, after ``settle_s`` s for them to exit
    on their own; return the pids that had not."""
    deadline = time.monotonic() + settle_s
    while True:
        pids = _group_members(pgid)
        if not pids or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return pids


def _group_members(pgid: int) -> list[int]:
    import psutil

    pids = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.pid != pgid and proc.status() != psutil.STATUS_ZOMBIE:
                pids.append(proc.pid)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return pids


def _synthetic(item: pytest.Item, when: str, message: str) -> pytest.TestReport:
    variant = _variant_of(item)
    props: list[tuple[str, object]] = []
    clauses = _clauses(item)
    if clauses and variant is not None:
        props = [
            ("harness_clauses", ",".join(clauses)),
            ("harness_backend", variant.backend.name),
            ("harness_variant", variant.id),
        ]
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords=dict.fromkeys(item.keywords, 1),
        outcome="failed",
        longrepr=f"[harness] {item.nodeid}: {message}",
        when=when,  # type: ignore[arg-type]
        user_properties=props,
    )
