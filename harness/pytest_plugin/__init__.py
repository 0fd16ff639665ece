"""The pytest plugin: backends as parameters, isolation, leak checks, the clause report.

Loaded through the ``pytest11`` entry point. For every test that uses the
``backend`` fixture (all of ``harness.conformance``):

- it is parametrised over the selected backends, world sizes and start methods
  (``--backend``, ``--world-size``, ``--start-method``: ``options``);
- it runs in a fresh forked process that leads its own process group, so one
  backend's leftovers never reach the next test; past its timeout the whole
  group is killed, the stacks it dumped are attached, the test is reported
  failed, and the run goes on (``isolation``);
- a clause the backend declares unsupported is skipped with its reason;
- its outcome lands in the clause matrix printed at the end, one of SPEC.md's
  outcomes, and a run that checked nothing for a named backend fails
  (``outcomes``).

The pytest parent never initialises CUDA nor starts a worker; it imports torch
once, before the first test process forks, so that no test pays for it again.

This package holds the hooks (here), the fixtures (``fixtures``) and the
leak check after each test's executor (``leak_check``), the backends' run-wide
sessions (``sessions``), the run's state in the stash (``keys``), the settings
and variants (``options``), one forked process per test (``isolation``) and tests side by
side (``parallel``), the outcomes into the matrix (``outcomes``), known
failures (``expected``) and what a first start leaves for good (``residue``);
what a dying run leaves is ``harness.system.reaper``'s. It may import every
floor below it: the report, whose matrix it fills, the suite, the public API,
the loader, ``harness.system`` and ``harness.contract``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from typing import Any

import pytest

from harness.backends import BUILTIN_BACKENDS, LoadedBackend, module_installed
from harness.conformance import spec_bounds
from harness.conformance.sample import SAMPLE
from harness.contract import CLAUSES
from harness.pytest_plugin.expected import known_failure_key, leak_key, mark_known_failures, unapplied_key
from harness.pytest_plugin.fixtures import (  # noqa: F401 - the plugin's fixtures: pytest reads them from this module
    _CheckedFactory,
    backend,
    executor,
    executor_config,
    harness_seed,
    harness_variant,
    start_method,
    variant_config,
    world_size,
)
from harness.pytest_plugin.isolation import (
    SHARED_SHM_KEY,
    WORLD_KEY,
    IsolatedTest,
    prepare_parent,
    progress_every_s,
    run_isolated,
    skipped_report,
    timeout_of,
)
from harness.pytest_plugin.keys import (
    collector_key,
    isolated_key,
    matrix_key,
    missing_key,
    options_key,
    reaper_key,
    sessions_key,
)
from harness.pytest_plugin.markers import DISTRIBUTED, GPU, MARKERS, RAY, add_tier_aliases
from harness.pytest_plugin.options import (
    NO_BACKEND,
    Options,
    Unavailable,
    Variant,
    add_options,
    add_short_forms,
    clauses_of,
    load_all,
    parametrize,
    parse_options,
    variant_of,
)
from harness.pytest_plugin.outcomes import MatrixCollector, tag_item
from harness.pytest_plugin.parallel import ISOLATED_MARKER, run_side_by_side
from harness.pytest_plugin.sessions import Sessions
from harness.report import ClauseMatrix, machine_settings, terminal
from harness.system.cpu import log_run_cpu, run_started
from harness.system.gpus import gpu_count
from harness.system.nodes import unavailable_reason
from harness.system.paths import unwritable
from harness.system.reaper import Reaper
from harness.verdicts import Prop

__all__ = ["Variant", "gpu_count"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the harness options and their ini twins."""
    add_options(parser)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None]:
    """Once the project's own conftests have registered their options, add the
    short forms of ours that are still free (``--backend`` for ``--harness-backend``)."""
    result = yield
    add_short_forms(parser)
    return result


def _check_report_path(config: pytest.Config, option: str) -> None:
    path = config.getoption(option)
    if not path:
        return
    why = unwritable(path)
    if why is not None:
        raise pytest.UsageError(f"Invalid --{option.replace('_', '-')} {path!r}: {why}")


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers; parse and check the harness settings."""
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    opts = parse_options(config)
    progress_every_s()  # a bad HARNESS_PROGRESS_S is bad input, named before any test runs
    for option in ("harness_report_json", "harness_report_md", "harness_report_html"):
        _check_report_path(config, option)
    if config.getoption("harness_test_logs") and not _xdist_worker(config):
        from harness.pytest_plugin.per_test_logs import TestLogs

        config.pluginmanager.register(TestLogs(config.getoption("harness_test_logs")), "harness-test-logs")
    load_all(opts)
    config.stash[options_key] = opts
    matrix = ClauseMatrix()
    matrix.settings = machine_settings(
        {
            "backends": ",".join(opts.backends) or "(none)",
            "world sizes": opts.world_sizes,
            **({"world sizes by backend": opts.backend_world_sizes} if opts.backend_world_sizes else {}),
            "start methods": opts.start_methods,
            **(
                {}
                if opts.start_methods_explicit
                else {
                    "start methods run": "a backend's first at every world size, its others at one (2 if selected)"
                    + (", the sample alone (one test of every clause)" if opts.sample_others else "")
                }
            ),
            **({"required GPUs": opts.require_gpus} if opts.require_gpus else {}),
            **({"node counts": opts.nodes} if opts.nodes != [1] else {}),
            **({"required nodes": "yes"} if opts.require_nodes else {}),
            "seed": opts.seed,
        }
    )
    config.stash[matrix_key] = matrix
    config.stash[sessions_key] = Sessions()
    collector = MatrixCollector(matrix, opts, config)
    if not _xdist_worker(config):
        # Written as the run goes: a run cut off keeps what it found.
        collector.json_path = config.getoption("harness_report_json")
    config.stash[collector_key] = collector
    config.pluginmanager.register(collector, "harness-matrix")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave the backends' run-wide sessions; let the reaper go."""
    sessions = config.stash.get(sessions_key, None)
    if sessions is not None:
        sessions.close()
    reaper = config.stash.get(reaper_key, None)
    if reaper is not None:
        reaper.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise every test that uses ``backend`` over the selected variants."""
    if "harness_variant" in metafunc.fixturenames:
        parametrize(metafunc, metafunc.config.stash[options_key])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tag backend tests for the matrix and mark them distributed; skip GPU tests
    on machines with too few GPUs (fail them under --require-gpus), and Ray
    tests where Ray is not installed."""
    opts = config.stash[options_key]
    collector = config.stash[collector_key]
    if not opts.backends and any("harness_variant" in getattr(i, "fixturenames", ()) for i in items):
        raise pytest.UsageError(NO_BACKEND)
    if opts.clauses:
        keep = [i for i in items if set(clauses_of(i)) & set(opts.clauses)]
        dropped = [i for i in items if not set(clauses_of(i)) & set(opts.clauses)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
    lists = mark_known_failures(items, opts.expected_failures)
    collector.leak_entries = {listed[1].where for i in items if (listed := i.stash.get(leak_key, None)) is not None}
    for name, known in lists.items():
        loaded = opts.loaded.get(name)
        installed = getattr(loaded, "version", None)
        collector.matrix.settings[f"known failures of {name}"] = (
            f"{known.path} ({len(known.entries)} entries"
            + (f", recorded with {known.version}" if known.version else "")
            + (f"; installed: {installed}" if installed else "")
            + ")"
        )
    found: int | None = None
    nodes_missing: str | None = None  # why multi-node variants cannot run: looked up at the first one
    missing_ray = not module_installed("ray")
    for item in items:
        for clause in clauses_of(item):
            if clause not in CLAUSES:
                raise pytest.UsageError(f"{item.nodeid}: clause marker names unknown clause {clause!r}")
        if missing_ray and item.get_closest_marker(RAY) is not None:
            item.add_marker(
                pytest.mark.skip(reason=f"ray is not installed; install it with: {BUILTIN_BACKENDS['ray'][1]}")
            )
        if "harness_variant" in getattr(item, "fixturenames", ()):
            collector.saw_backend_tests = True
            item.add_marker(pytest.mark.harness_distributed)
            tag_item(item)
        add_tier_aliases(item)
        variant = variant_of(item)
        if isinstance(variant, Variant) and variant.nodes > 1 and variant.backend.supports_nodes(variant.nodes):
            if nodes_missing is None:
                nodes_missing = multi_node_unavailable(opts.isolate) or ""
            reason = nodes_missing
            if not reason:
                pass
            elif opts.require_nodes:
                item.stash[missing_key] = f"{reason}, and --require-nodes demands multi-node runs"
            else:
                item.add_marker(pytest.mark.skip(reason=reason))
        gpu = item.get_closest_marker(GPU)
        if gpu is not None:
            # Without min_gpus, a backend test needs one GPU per rank.
            default = variant.world_size if isinstance(variant, (Variant, Unavailable)) else 1
            need = int(gpu.kwargs.get("min_gpus", gpu.args[0] if gpu.args else default))
            if found is None:
                found = gpu_count()
            if found < need:
                reason = f"needs {need} GPU{'s' * (need > 1)}, found {found}"
                if need <= opts.require_gpus:
                    item.stash[missing_key] = f"{reason}, and --require-gpus {opts.require_gpus} demands them"
                else:
                    item.add_marker(pytest.mark.skip(reason=reason))
    if opts.sample or opts.sample_others:
        # After tagging: the matrix shows what the sample left out as not run, filtered out.
        dropped = [i for i in items if not _in_sample(i, opts)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [i for i in items if _in_sample(i, opts)]


def multi_node_unavailable(isolate: bool) -> str | None:
    """Why a multi-node variant of a backend that declares it cannot run here,
    or None: it runs on simulated nodes, or on the cluster ``RAY_ADDRESS`` names.
    ``isolate``: whether the run gives each test a process of its own (a driver
    of simulated nodes must be one: it joins their network)."""
    if os.environ.get("RAY_ADDRESS"):
        return None
    missing = unavailable_reason()
    if missing is not None:
        root = "needs root for network namespaces"
        return missing if missing.startswith(root) else f"{root} (simulated nodes: {missing})"
    if not isolate or not hasattr(os, "fork"):
        return (
            "runs across nodes (simulated here) only in a test process of its own, joined to their network, "
            "and this run gives tests none (--isolate no)"
        )
    return None


def _in_sample(item: pytest.Item, opts: Options) -> bool:
    """False for a test that --harness-sample leaves out: a variant it names, and
    a test of none of the sample's names (as ``-k`` reads them)."""
    variant = variant_of(item)
    if not isinstance(variant, Variant) or not opts.samples(variant):
        return True
    name = item.name.lower()
    return any(all(word in name for word in part.lower().split(" and ")) for part in SAMPLE)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail GPU tests whose GPUs are required but missing (multi-node tests,
    their nodes); skip clauses the backend declares unsupported."""
    missing = item.stash.get(missing_key, None)
    if missing:
        pytest.fail(missing, pytrace=False)
    clauses = clauses_of(item)
    variant = variant_of(item)
    if not clauses or not isinstance(variant, Variant):
        return
    for clause in clauses:
        reason = variant.backend.declared(clause)
        if reason:
            item.user_properties.append((Prop.DECLARED, reason))
            pytest.skip(f"{variant.backend.name} declares {clause} unsupported: {reason}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None]:
    """Put on the test's report what its checks noted about SPEC's bounds on a
    loaded machine (``spec_bounds``): a pass that needed the stretch says so. A
    test its backend's list expects to fail judges them exactly (``spec_bounds``
    says why)."""
    spec_bounds.drain_notes()  # another test's, in a process that runs several
    try:
        with spec_bounds.exact_while(item.stash.get(known_failure_key, False)):
            return (yield)
    finally:
        item.user_properties.extend((Prop.NOTE, note) for note in spec_bounds.drain_notes())


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Start the reaper and the one resource tracker the forked tests share; put
    the settings and the spec version into a JUnit report, when one is written."""
    from _pytest.junitxml import xml_key

    run_started()
    xml = session.config.stash.get(xml_key, None)
    if xml is not None:
        for key, value in session.config.stash[matrix_key].settings.items():
            xml.add_global_property(f"harness {key}", str(value))
    if session.config.stash[options_key].isolate and hasattr(os, "fork"):
        # Whatever ends this process, the tests running then end with it.
        session.config.stash[reaper_key] = Reaper()
        # One resource tracker for the whole run, started here: forked test
        # processes share it instead of each leaving one behind in its group.
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()


def _reported_before_fork(item: pytest.Item) -> bool:
    """Start the item's backend session (before any fork: it outlives the test
    processes); report the item skipped if its variant's factory already failed."""
    variant = variant_of(item)
    if not isinstance(variant, Variant):
        return False
    sessions = item.config.stash[sessions_key]
    if variant.nodes > 1:
        sessions.ensure_nodes(variant.nodes)
        sessions.heal(variant.nodes)
        world = sessions.world(variant.nodes)
        if world is not None:
            item.stash[WORLD_KEY] = world
    else:
        sessions.ensure(variant.backend)
        if variant.backend.session is not None:
            item.stash[SHARED_SHM_KEY] = (
                f"backend {variant.backend.name!r} runs its workers in its run-wide session's processes, "
                "outside the test, which meet the caller in the machine's /dev/shm"
            )
    failed = item.config.stash[collector_key].factory_failures.get(variant.id)
    if failed is None:
        return False
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    item.ihook.pytest_runtest_logreport(report=skipped_report(item, f"the factory failed for {failed}"))
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _leave_setups_for(item: pytest.Item) -> None:
    """Tear down, in this process, what earlier in-process tests set up and
    ``item`` does not share (another module's fixtures): the forked test
    process starts from this state, and pytest refuses to set up an item
    beside another module's leftovers."""
    try:
        item.session._setupstate.teardown_exact(item)
    except Exception as exc:  # noqa: BLE001 - an earlier test's teardown; the run goes on
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"[harness] tearing down before {item.nodeid} failed: {exc!r}", red=True)


def _runs_isolated(item: pytest.Item) -> bool:
    opts = item.config.stash[options_key]
    marked = item.get_closest_marker(DISTRIBUTED) or item.get_closest_marker(ISOLATED_MARKER)
    return opts.isolate and marked is not None and hasattr(os, "fork")


def _progress(config: pytest.Config) -> Callable[[str], None] | None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return None if reporter is None else lambda text: reporter.write_line(text, yellow=True)


def _xdist_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (it runs the tests the controller sends it)."""
    return hasattr(config, "workerinput")


def _under_xdist(config: pytest.Config) -> bool:
    """Whether pytest-xdist runs this session: as a worker, or as the controller of workers."""
    return _xdist_worker(config) or config.pluginmanager.get_plugin("dsession") is not None


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """With --jobs above 1, run isolated tests side by side (``parallel``).

    Only where there are isolated tests to run, and never under pytest-xdist,
    whose controller and workers run loops of their own (each xdist worker
    still runs each backend test in a forked process of its own): a session
    without backend tests runs as pytest and its other plugins would run it."""
    opts = session.config.stash[options_key]
    if opts.jobs <= 1 or not opts.isolate or not hasattr(os, "pidfd_open") or _under_xdist(session.config):
        return None  # pytest's own loop (or xdist's), one test at a time
    if not session.stash.get(isolated_key, False):
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error{'s' * (session.testsfailed != 1)} during collection")
    if session.config.option.collectonly:
        return True
    reaper = session.config.stash.get(reaper_key, None)

    def start(item: pytest.Item) -> IsolatedTest | None:
        if _reported_before_fork(item):
            return None
        _leave_setups_for(item)
        return IsolatedTest(item, timeout_of(item, opts), reaper, stretch=not opts.timeout_explicit)

    def variant(item: pytest.Item) -> str | None:
        v = variant_of(item)
        return v.id if isinstance(v, Variant) else None

    run_side_by_side(session, opts.jobs, _runs_isolated, start, _progress(session.config), variant)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Run distributed tests in a forked child that leads its own process group."""
    if _reported_before_fork(item):
        return True
    if not item.session.stash.get(isolated_key, False):
        return None  # no test of ours in this session: pytest (and its other plugins) run it as they would
    # Also before a test that runs here: what the isolated tests before it did
    # not tear down here (they ran elsewhere) must not stand in its way.
    _leave_setups_for(item)
    if not _runs_isolated(item):
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reaper = item.config.stash.get(reaper_key, None)
    opts = item.config.stash[options_key]
    stretch = not opts.timeout_explicit  # a timeout given explicitly is exact
    for report in run_isolated(item, timeout_of(item, opts), reaper, _progress(item.config), stretch):
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before any test runs, import in this process what every test process
    would import again (torch), when some test will run isolated (not for
    --collect-only, which runs none)."""
    session.stash[isolated_key] = any(_runs_isolated(i) for i in session.items)
    if session.stash[isolated_key] and not session.config.option.collectonly:
        loaded = session.config.stash[options_key].loaded.values()
        prepare_parent([m for b in loaded if isinstance(b, LoadedBackend) for m in b.preload])


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Complete the matrix; a run that checked nothing for a named backend fails.
    An xdist worker hands what it collected to the controller, which does that."""
    collector = session.config.stash[collector_key]
    log_run_cpu()
    if _xdist_worker(session.config):
        session.config.workeroutput["harness"] = collector.to_worker_output()  # type: ignore[attr-defined]
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop:
        collector.matrix.state = f"interrupted: {session.shouldstop or 'KeyboardInterrupt'}"
    elif session.shouldfail:
        collector.matrix.state = f"stopped: {session.shouldfail}"
    else:
        collector.matrix.state = "finished"
    collector.finish(session)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print the clause matrix; write JSON and Markdown when asked (the xdist
    controller does, for its workers)."""
    if _xdist_worker(config):
        return
    matrix = config.stash[matrix_key]
    matrix.write(config.getoption("harness_report_json"), config.getoption("harness_report_md"))
    if config.getoption("harness_report_html"):
        from harness.report.html import write_page

        write_page(matrix, config.getoption("harness_report_html"))
    if matrix.cells or matrix.not_checked:
        _matrix_summary(terminalreporter, config, matrix)
    unapplied = config.stash.get(unapplied_key, [])
    if unapplied:
        terminalreporter.section("known failures that applied to no test", sep="-", yellow=True)
        for line in unapplied:
            terminalreporter.write_line(line, yellow=True)


def _matrix_summary(terminalreporter: Any, config: pytest.Config, matrix: ClauseMatrix) -> None:
    terminalreporter.section("harness conformance: clause x backend, world size, device")
    for key, value in matrix.settings.items():
        terminalreporter.write_line(f"{key}: {value}")
    terminalreporter.write_line("")
    terminalreporter.write_line(terminal.render(matrix, config.get_terminal_writer().fullwidth))
    collector = config.stash[collector_key]
    for failure in collector.unlisted_failures:
        terminalreporter.write_line(
            f"FAILED (not on the known-failures list; pytest counted it as expected): {failure}"
        )
    for where in sorted(collector.leak_entries - collector.known_leaks):
        terminalreporter.write_line(f"listed leak not met by any test of this run (fixed? or timing): {where}")
