"""The plugin's settings and the variants they select.

Each setting comes from the command line, else the environment, else the ini
file, else its default, and a bad value is a usage error naming the value and
where it came from. A variant is one backend at one world size, start method
and node count: every test that uses the ``backend`` fixture runs once per variant.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pytest

from harness.backends import BackendUnavailableError, LoadedBackend, load_backend
from harness.contract import CLAUSES, START_METHODS
from harness.pytest_plugin.markers import CLAUSE
from harness.run_options import INI_ONLY, RUN_OPTIONS, run_option
from harness.verdicts import not_applicable_reason

__all__ = [
    "Options",
    "Unavailable",
    "Variant",
    "add_options",
    "clauses_of",
    "environment",
    "option_names",
    "parametrize",
    "parse_options",
    "variant_of",
]

_DEFAULT_WORLD_SIZES = "1,2,4"
_DEFAULT_TIMEOUT_S = 300.0


def nodes_suffix(nodes: int) -> str:
    """What a variant's id adds for its node count: nothing for one node."""
    return f"-{nodes}nodes" if nodes > 1 else ""


@dataclass(frozen=True)
class Variant:
    """One parametrisation: a backend at a world size, start method and node count."""

    backend: LoadedBackend
    world_size: int
    start_method: str
    nodes: int = 1

    @property
    def id(self) -> str:
        return f"{self.backend.name}-ws{self.world_size}-{self.start_method}{nodes_suffix(self.nodes)}"


@dataclass(frozen=True)
class Unavailable:
    """The parameter of a selected backend that cannot load here (its optional
    dependency is missing): its tests are skipped, and reported "not run"."""

    name: str
    reason: str
    world_size: int
    nodes: int = 1

    @property
    def id(self) -> str:
        return f"{self.name}-ws{self.world_size}{nodes_suffix(self.nodes)}"


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
    clauses: list[str] = field(default_factory=list)  # --clause: only these
    backends_where: str = "the command line"
    jobs: int = 1  # isolated tests run side by side, at most this many at once
    #: False where the start methods are the default: a backend's first start
    #: method then runs at every world size, its others at one (see world_sizes_of).
    start_methods_explicit: bool = True
    seed: int = 0  # of the tensor-parallel checks' random weights and inputs
    expected_failures: tuple[str, str] | None = None  # (path, where it came from)
    #: --harness-sample: "backend" or "backend/start method" selectors whose
    #: variants run the sample only, and where the value came from.
    sample: list[str] = field(default_factory=list)
    sample_where: str = "the default"
    #: --harness-nodes: the node counts to run (1: every rank on this machine).
    nodes: list[int] = field(default_factory=lambda: [1])
    #: --harness-require-nodes: a multi-node variant that cannot run fails instead of reading not run.
    require_nodes: bool = False
    #: --harness-sample-others: where the start methods are the default, a
    #: backend's other start methods run the sample (its first runs every test).
    sample_others: bool = False

    def samples(self, variant: Variant) -> bool:
        """Whether ``variant`` runs the sample alone (--harness-sample, or
        --harness-sample-others for a backend's other start methods)."""
        name = variant.backend.name
        if name in self.sample or f"{name}/{variant.start_method}" in self.sample:
            return True
        if not self.sample_others or self.start_methods_explicit:
            return False
        offered = self.offered_start_methods(variant.backend)
        return bool(offered) and variant.start_method != offered[0]

    def offered_start_methods(self, loaded: LoadedBackend | None) -> list[str]:
        """The selected start methods that mean something to ``loaded``, its first first."""
        declared = loaded.start_methods if loaded is not None else None
        return [m for m in (declared or START_METHODS) if m in self.start_methods]

    def world_sizes_of(
        self, backend: str, start_method: str | None = None, loaded: LoadedBackend | None = None
    ) -> list[int]:
        """The world sizes to run ``backend`` at (with ``start_method``, if one
        is named; ``loaded``: the backend, for the start methods and world
        sizes it declares)."""
        if start_method is not None and f"{backend}/{start_method}" in self.backend_world_sizes:
            return self.backend_world_sizes[f"{backend}/{start_method}"]
        sizes = self.backend_world_sizes.get(backend, self.world_sizes)
        if start_method is None or self.start_methods_explicit:
            return sizes
        offered = self.offered_start_methods(loaded)
        if not offered or start_method == offered[0]:
            return sizes
        runnable = [ws for ws in sizes if loaded is None or loaded.supports_world_size(ws)]
        return [secondary_world_size(runnable)] if runnable else []


def secondary_world_size(sizes: list[int]) -> int:
    """The one world size a backend's other start methods run at by default: 2
    where selected (the smallest with a peer rank to talk to), else the
    smallest above 1, else the smallest."""
    if 2 in sizes:
        return 2
    above_one = [ws for ws in sizes if ws > 1]
    return min(above_one) if above_one else min(sizes)


_GROUP = "harness"


def add_options(parser: pytest.Parser) -> None:
    """Register the harness options (all prefixed ``--harness-``) and their ini twins."""
    group = parser.getgroup(_GROUP, "executor conformance")
    for row in RUN_OPTIONS:
        if row.flag:
            group.addoption(row.option, dest=row.dest, action="store_true", help=row.help)
        else:
            group.addoption(row.option, dest=row.dest, default=None, help=row.help)
        if row.ini:
            parser.addini(row.ini, row.help, default="")
    for key, help_text in INI_ONLY.items():
        parser.addini(key, help_text, default="")


def add_short_forms(parser: pytest.Parser) -> list[str]:
    """Add the short forms (``--backend`` for ``--harness-backend``) that no other
    plugin or conftest registered; called once the initial conftests are loaded,
    so a project with its own ``--backend`` keeps it. Returns those added."""
    taken = {name for opt in _all_options(parser) for name in opt.names()}
    group = parser.getgroup(_GROUP)
    added = []
    for row in RUN_OPTIONS:
        if row.short and row.short_form not in taken:
            if row.flag:
                group.addoption(row.short_form, dest=row.dest, action="store_true", help=f"short for {row.option}")
            else:
                group.addoption(row.short_form, dest=row.dest, default=None, help=f"short for {row.option}")
            added.append(row.short_form)
    return added


def _all_options(parser: pytest.Parser) -> list[Any]:
    # pytest keeps no public list of every option; these are where addoption puts them.
    groups = [parser._anonymous, *parser._groups]
    return [opt for group in groups for opt in group.options]


#: Read by isolation.progress_every_s where a test is watched, not with the options.
PROGRESS_VARIABLE = "HARNESS_PROGRESS_S"


def option_names() -> list[str]:
    """Every option of the plugin, by its long name (``--harness-...``)."""
    return [row.option for row in RUN_OPTIONS]


def environment() -> dict[str, str]:
    """Every environment variable a run reads, with what it does (``conform --help`` lists them)."""
    from harness.conformance.spec_bounds import EXACT_ENV
    from harness.system.cpu import CPU_LOG_ENV

    found = {row.env: f"as {row.option}" + (" (1 or 0)" if row.flag else "") for row in RUN_OPTIONS if row.env}
    found["PYTEST_TIMEOUT"] = "pytest-timeout's: the timeout of each test where --harness-timeout is not given"
    found[EXACT_ENV] = "1: SPEC.md's time bounds are exact, not stretched on a loaded machine"
    found[CPU_LOG_ENV] = "a file each isolated test's CPU and wall time by phase is appended to (JSON lines)"
    # harness/executors/ray/__init__.py's SESSION_CLUSTER_ENV: imported, that module looks for Ray.
    found["HARNESS_RAY_SESSION_CLUSTER"] = "0: each Ray executor starts its own cluster, not one for the run"
    # harness/executors/vllm/_plugin_env.py's ENABLE_ENV: imported, that package imports vLLM.
    found["HARNESS_VLLM_RAY_PLATFORM"] = (
        "1 (what loading vllm-ray sets, unless given): vLLM resolves the suite's platform plugin, its CPU "
        "platform with a Ray device key; any other value: vLLM's platform as installed"
    )
    found[PROGRESS_VARIABLE] = "seconds after which, and as often again, a still-running test is named (30)"
    return found


def _setting(config: pytest.Config, dest: str, default: str) -> tuple[str, str]:
    """Command line > environment > ini > default, with where the value came from."""
    row = run_option(dest)
    env, ini = row.env or "", row.ini
    value = config.getoption(dest)
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
    backends, backends_where = _setting(config, "harness_backend", "")
    ws_text, ws_where = _setting(config, "harness_world_size", _DEFAULT_WORLD_SIZES)
    sm_text, sm_where = _setting(config, "harness_start_method", ",".join(START_METHODS))
    to_text, to_where = _setting(config, "harness_timeout", str(_DEFAULT_TIMEOUT_S))
    if to_where == "the default":
        to_text, to_where = _pytest_timeout(config) or (to_text, to_where)
    world_sizes = _world_sizes(ws_text, ws_where)
    per_backend: dict[str, list[int]] = {}
    if ws_where in ("the ini setting harness_world_sizes", "the default"):
        where = "the ini setting harness_backend_world_sizes"
        for entry in [e.strip() for e in str(config.getini("harness_backend_world_sizes")).split(";") if e.strip()]:
            name, eq, sizes = entry.partition("=")
            if not eq or not name.strip():
                raise pytest.UsageError(f"Invalid entry {entry!r} from {where}: expected NAME=WS[,WS...]")
            _, slash, method = name.strip().partition("/")
            if slash and method not in START_METHODS:
                raise pytest.UsageError(
                    f"Invalid start method {method!r} in {entry!r} from {where}: expected one of {START_METHODS}"
                )
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
    declared = dict.fromkeys(
        _clause_ids(config.getoption("harness_declare") or "", "--harness-declare"),
        "declared unsupported with --declare",
    )
    cl_text, cl_where = _setting(config, "harness_clause", "")
    clauses = _clause_ids(cl_text, cl_where)
    gpus_text, gpus_where = _setting(config, "harness_require_gpus", "0")
    if not gpus_text.strip().isdigit():
        raise pytest.UsageError(f"Invalid GPU count {gpus_text!r} from {gpus_where}: expected an integer >= 0")
    seed_text, seed_where = _setting(config, "harness_seed", "0")
    if not seed_text.strip().isdigit():
        raise pytest.UsageError(f"Invalid seed {seed_text!r} from {seed_where}: expected an integer >= 0")
    jobs_text, jobs_where = _setting(config, "harness_jobs", "auto")
    jobs = _jobs(jobs_text, jobs_where)
    sample_text, sample_where = _setting(config, "harness_sample", "")
    sample = _split(sample_text)
    for selector in sample:
        backend, slash, method = selector.partition("/")
        if not backend or (slash and method not in START_METHODS):
            raise pytest.UsageError(
                f"Invalid sample selector {selector!r} from {sample_where}: expected a backend, "
                f"or a backend/start method with a start method of {START_METHODS}"
            )
        # A project's ini or environment may name backends its other runs do
        # not have (as harness_backend_world_sizes does); a command line may not.
        if backend not in _split(backends) and sample_where == "the command line":
            raise pytest.UsageError(
                f"Invalid sample selector {selector!r} from {sample_where}: {backend!r} is not a backend "
                f"of this run ({backends or 'none'}, from {backends_where})"
            )
    nodes_text, nodes_where = _setting(config, "harness_nodes", "1")
    nodes = _node_counts(nodes_text, nodes_where)
    _check_node_counts(_split(backends), nodes, nodes_where, world_sizes, ws_where, per_backend)
    require_nodes = _flag(config, "harness_require_nodes")
    sample_others = _flag(config, "harness_sample_others")
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
        clauses=clauses,
        backends_where=backends_where,
        jobs=jobs,
        start_methods_explicit=sm_where != "the default",
        seed=int(seed_text),
        expected_failures=_expected_failures(config),
        sample=sample,
        sample_where=sample_where,
        nodes=nodes,
        require_nodes=require_nodes,
        sample_others=sample_others,
    )


def _node_counts(text: str, where: str) -> list[int]:
    counts = list(dict.fromkeys(_positive_ints(text, where, "node count")))
    if not counts:
        raise pytest.UsageError(f"Invalid node counts {text!r} from {where}: expected integers >= 1, e.g. 1,2")
    return counts


def _check_node_counts(
    backends: list[str],
    nodes: list[int],
    nodes_where: str,
    world_sizes: list[int],
    ws_where: str,
    per_backend: dict[str, list[int]],
) -> None:
    """A usage error for a node count that divides none of a backend's selected
    world sizes: each node runs an equal share of the ranks, so such a count
    selects no variant at all, and the run was a screen of empty parameter sets
    that ended in "no test of it was selected", the cause never named.

    The selected world sizes, not those a backend declares: a count that its
    declarations rule out reads "not applicable" in the matrix, with why."""
    for name in backends:
        own = [ws for key, sizes in per_backend.items() if key == name or key.startswith(f"{name}/") for ws in sizes]
        sizes = sorted(set(own) if own else set(world_sizes))
        where = "the ini setting harness_backend_world_sizes" if own else ws_where
        for count in nodes:
            if not any(ws % count == 0 for ws in sizes):
                whose = f" of backend {name!r}" if len(backends) > 1 else ""
                raise pytest.UsageError(
                    f"Invalid node count {count} from {nodes_where}: it divides none of the world sizes{whose} "
                    f"{','.join(map(str, sizes))} (from {where}), so it selects no test: a run across {count} "
                    f"nodes puts an equal share of the ranks on each, and needs a world size that is a multiple "
                    f"of {count} (e.g. {count} or {2 * count})"
                )


def _flag(config: pytest.Config, dest: str) -> bool:
    """A flag: given on the command line, or its environment variable 1."""
    return bool(config.getoption(dest)) or _flag_env(run_option(dest).env or "")


def _flag_env(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in ("", "0", "no", "false"):
        return False
    if value in ("1", "yes", "true"):
        return True
    raise pytest.UsageError(f"Invalid value {value!r} of the environment variable {name}: expected 1 or 0")


def _expected_failures(config: pytest.Config) -> tuple[str, str] | None:
    path, where = _setting(config, "harness_expected_failures", "")
    return (path, where) if path else None


_AUTO_JOBS_MAX = 8


def _jobs(text: str, where: str) -> int:
    text = text.strip().lower()
    if text == "auto":
        # Twice the CPUs: most tests wait (on 2 cores, `pytest -m "not gpu"` took
        # 549 s at 4 jobs against 596 s at 3). At most 8: each test may run 8
        # workers (C18 at world size 4), and a shared cluster has room for so many.
        return min(_AUTO_JOBS_MAX, 2 * (os.cpu_count() or 1))
    if not text.isdigit() or int(text) < 1:
        raise pytest.UsageError(f"Invalid job count {text!r} from {where}: expected an integer >= 1 or 'auto'")
    return int(text)


def _clause_ids(text: str, where: str) -> list[str]:
    ids = _split(text)
    for clause in ids:
        if clause not in CLAUSES:
            raise pytest.UsageError(f"Invalid clause {clause!r} from {where}: expected one of C1..C{len(CLAUSES)}")
    return ids


def _pytest_timeout(config: pytest.Config) -> tuple[str, str] | None:
    """pytest-timeout's own setting, if one is given: isolated tests honour it
    (for every test, as --harness-timeout does) rather than ignore it."""
    value = config.getoption("timeout", None)
    if value is not None:
        return str(value), "pytest-timeout's --timeout"
    if os.environ.get("PYTEST_TIMEOUT"):
        return os.environ["PYTEST_TIMEOUT"], "the environment variable PYTEST_TIMEOUT"
    try:
        ini = config.getini("timeout")
    except ValueError:  # pytest-timeout is not installed
        return None
    return (str(ini), "pytest-timeout's ini setting timeout") if ini else None


def _world_sizes(text: str, where: str) -> list[int]:
    return _positive_ints(text, where, "world size")


def _positive_ints(text: str, where: str, what: str) -> list[int]:
    out = []
    for v in _split(text):
        if not v.isdigit() or int(v) < 1:
            raise pytest.UsageError(f"Invalid {what} {v!r} from {where}: expected integers >= 1")
        out.append(int(v))
    return out


def load_all(opts: Options) -> None:
    """Load every selected backend once, before collection: a backend that
    cannot be named is one usage error naming the value and where it came from;
    one whose optional dependency is missing is kept, to be reported not run."""
    for name in opts.backends:
        try:
            opts.loaded[name] = load_backend(name, opts.declared, where=opts.backends_where)
        except BackendUnavailableError as exc:
            opts.loaded[name] = exc
        except Exception as exc:  # noqa: BLE001 - whatever importing a user's module raises
            text = str(exc)
            if not text.startswith(f"backend {name!r}") and not text.startswith(f"unknown backend {name!r}"):
                text = f"backend {name!r} from {opts.backends_where}: {type(exc).__name__}: {exc}"
            raise pytest.UsageError(text) from None


def parametrize(metafunc: pytest.Metafunc, opts: Options) -> None:
    """Parametrise a test that uses ``backend`` over the selected variants (none
    when no backend is selected: collection then stops with one usage error)."""
    params = []
    for name in opts.backends:
        loaded = opts.loaded[name]
        if isinstance(loaded, BaseException):
            reason = f"backend {name!r} unavailable: {loaded}"
            for k in opts.nodes:
                for ws in opts.world_sizes_of(name):
                    if ws % k == 0:
                        u = Unavailable(name, reason, ws, k)
                        params.append(pytest.param(u, id=u.id, marks=pytest.mark.skip(reason=reason)))
            continue
        starts = [s for s in opts.start_methods if s in (loaded.start_methods or START_METHODS)]
        sizes = {sm: opts.world_sizes_of(name, sm, loaded) for sm in starts}
        for k in opts.nodes:
            variants = [
                Variant(loaded, ws, sm, k)
                for ws in sorted({w for sm in starts for w in sizes[sm]})
                for sm in starts
                if ws in sizes[sm] and loaded.supports_world_size(ws) and ws % k == 0
            ]
            if not loaded.supports_nodes(k):
                # One start method is enough to say so: the cells are per world size.
                variants = [v for v in variants if v.start_method == variants[0].start_method]
                spans = _counts(loaded.nodes)
                reason = not_applicable_reason(f"{name} runs on {spans} only (it declares nodes={loaded.nodes})")
                params += [pytest.param(v, id=v.id, marks=pytest.mark.skip(reason=reason)) for v in variants]
                continue
            params += [pytest.param(v, id=v.id) for v in variants]
    metafunc.parametrize("harness_variant", params, indirect=True)


def _counts(nodes: tuple[int, ...]) -> str:
    return "1 node" if nodes == (1,) else f"{', '.join(map(str, nodes))} nodes"


NO_BACKEND = (
    "no backend to test: pass --harness-backend NAME (e.g. --harness-backend mp), "
    "set HARNESS_BACKEND, or the ini setting harness_backends"
)


def clauses_of(item: pytest.Item) -> list[str]:
    """The clause ids a test's ``harness_clause`` markers name."""
    return [c for m in item.iter_markers(CLAUSE) for c in m.args]


def variant_of(item: pytest.Item) -> Variant | Unavailable | None:
    """The variant a test runs for, if it is a backend test."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    v = callspec.params.get("harness_variant")
    return v if isinstance(v, (Variant, Unavailable)) else None
