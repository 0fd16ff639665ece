"""Nodes as a variant dimension (``--harness-nodes``): a backend that does not
declare a node count reads "not applicable" there, one that declares it and
cannot be run across nodes here reads "not run" with the reason, and
``--require-nodes`` makes that a failure. The backends here construct nothing:
each test of the generated suite only reads the config the suite gives it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.report import FILTERED_OUT
from harness.system.load import LOAD_SCALE_MAX
from harness.system.modules import module_installed
from harness.system.nodes import unavailable_reason
from tests.bounded import run_bounded

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]

BACKENDS = """
def one_node(config):
    raise AssertionError("the generated suite never constructs an executor")

def spans_nodes(config):
    raise AssertionError("the generated suite never constructs an executor")

spans_nodes.nodes = (1, 2)
"""

SUITE = """
import os, socket
import pytest

@pytest.mark.harness_clause("C14")
def test_the_config_carries_the_variants_node_count(backend, executor_config, world_size, harness_variant):
    assert executor_config.nodes == harness_variant.nodes
    assert executor_config.world_size == world_size
    if executor_config.nodes > 1:
        # A driver of the simulated nodes: on their world's machine, pointed at their cluster.
        assert socket.gethostname() == "harness-world", socket.gethostname()
        assert os.environ["RAY_ADDRESS"].startswith("10.213.0."), os.environ.get("RAY_ADDRESS")
"""


def _run(
    pytester: pytest.Pytester, backend: str, *args: str, isolate: str = "no"
) -> tuple[pytest.RunResult, dict[str, dict[str, dict]]]:
    pytester.makepyfile(fake_backends=BACKENDS, test_suite=SUITE)
    path = pytester.path / "report.json"
    result = pytester.runpytest_subprocess(
        "--backend",
        f"fake_backends:{backend}",
        "--world-size",
        "1,2",
        "--start-method",
        "spawn",
        "--isolate",
        isolate,
        "-p",
        "no:cacheprovider",
        "-rs",
        "--report-json",
        str(path),
        *args,
    )
    cells = json.loads(path.read_text())["clauses"] if path.exists() else {}
    return result, cells


def test_a_backend_without_a_node_count_reads_not_applicable_there_and_runs_on_one_node(
    pytester: pytest.Pytester,
) -> None:
    _, cells = _run(pytester, "one_node", "--nodes", "1,2")
    c14 = cells["C14"]
    name = "fake_backends:one_node"
    # world size 1 cannot span 2 nodes: no such column at all
    assert set(c14) == {f"{name} ws1 cpu", f"{name} ws2 cpu", f"{name} ws2 cpu 2 nodes"}
    assert c14[f"{name} ws2 cpu 2 nodes"]["outcome"] == "not applicable"
    assert "runs on 1 node only" in json.dumps(c14[f"{name} ws2 cpu 2 nodes"])
    # the one-node variants ran their check (the factory is never called)
    assert c14[f"{name} ws1 cpu"]["outcome"] == "pass" and c14[f"{name} ws2 cpu"]["outcome"] == "pass"


def test_a_declared_node_count_that_cannot_run_here_reads_not_run_with_the_reason(
    pytester: pytest.Pytester,
) -> None:
    result, cells = _run(pytester, "spans_nodes", "--nodes", "2")
    cell = cells["C14"]["fake_backends:spans_nodes ws2 cpu 2 nodes"]
    assert cell["outcome"] == "not run"
    assert "across nodes" in json.dumps(cell) or "network namespaces" in json.dumps(cell)
    assert result.ret != 0, "a run whose every check was not run read green"
    result.stdout.fnmatch_lines(["*NOTHING CHECKED for backend 'fake_backends:spans_nodes'*"])


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"simulated nodes: {unavailable_reason()}")
@pytest.mark.skipif(not module_installed("ray"), reason="ray is not installed")
def test_a_declared_node_count_runs_its_tests_as_drivers_of_simulated_nodes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    result, cells = _run(pytester, "spans_nodes", "--nodes", "2", isolate="yes")
    cell = cells["C14"]["fake_backends:spans_nodes ws2 cpu 2 nodes"]
    assert cell["outcome"] == "pass", json.dumps(cell)
    assert result.ret == 0


def test_without_namespaces_the_reason_is_root_for_network_namespaces(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no ip, unshare, nsenter: no simulated nodes
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    _, cells = _run(pytester, "spans_nodes", "--nodes", "1,2")
    cell = cells["C14"]["fake_backends:spans_nodes ws2 cpu 2 nodes"]
    assert cell["outcome"] == "not run"
    assert "needs root for network namespaces" in json.dumps(cell)


def test_require_nodes_turns_not_run_into_a_failure(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = _run(pytester, "spans_nodes", "--nodes", "1,2", "--require-nodes")
    result.assert_outcomes(passed=2, errors=1)  # the 2-node variant fails at set-up, before any executor starts
    result.stdout.fnmatch_lines(["*--require-nodes demands multi-node runs*"])
    monkeypatch.setenv("HARNESS_REQUIRE_NODES", "1")
    assert _run(pytester, "spans_nodes", "--nodes", "1,2")[0].ret != 0
    monkeypatch.setenv("HARNESS_REQUIRE_NODES", "maybe")
    bad, _ = _run(pytester, "spans_nodes", "--nodes", "1,2")
    bad.stderr.fnmatch_lines(["*Invalid value 'maybe' of the environment variable HARNESS_REQUIRE_NODES*"])


@pytest.mark.parametrize(("value", "where"), [("0", "--nodes"), ("two", "HARNESS_NODES")])
def test_a_bad_node_count_is_a_usage_error_naming_it_and_where_it_came_from(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str, where: str
) -> None:
    if where == "HARNESS_NODES":
        monkeypatch.setenv("HARNESS_NODES", value)
        result, _ = _run(pytester, "one_node")
        result.stderr.fnmatch_lines([f"*Invalid node count {value!r} from the environment variable HARNESS_NODES*"])
    else:
        result, _ = _run(pytester, "one_node", "--nodes", value)
        result.stderr.fnmatch_lines([f"*Invalid node count {value!r} from the command line*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


#: Each broken backend across nodes, and the tests it runs: those of the
#: sentence it breaks, and one of another clause that it must pass.
ACROSS_NODES = {
    "ray_ranks_on_one_node": "c14 and not cuda",
    "ray_rendezvous_in_tmp": "c1_blocking",
    "ray_node_death_unnoticed": "node_failing or c1_blocking",
    "ray_outlives_the_caller": "(c13_every_process and idle) or c1_blocking",
    "ray_leaves_shm_on_nodes": "c1_blocking",
    "ray_undeclared_listeners": "test_c23_",
}
#: The bound of their one run: it takes about 240 s alone here (2 CPUs), 720 s
#: beside make test's other jobs; every wait in it (start-ups, SPEC's bounds)
#: stretches up to LOAD_SCALE_MAX times with the load, and the run may need
#: as much (CI killed a fixed 1500 s bound, with 6 jobs beside it).
ACROSS_NODES_BOUND_S = 400 * LOAD_SCALE_MAX
needs_nodes = [
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"simulated nodes: {unavailable_reason()}"),
    pytest.mark.skipif(not module_installed("ray"), reason="ray is not installed"),
]


def across(test: Callable[..., None]) -> Callable[..., None]:
    """A test of the shared multi-node run: where nodes can be simulated, with a
    bound for the whole run (the first test to ask waits for all of it). Marked
    ``nodes``: make test runs them in test-nodes, beside the other side jobs."""
    for mark in (*needs_nodes, pytest.mark.timeout(ACROSS_NODES_BOUND_S + 300), pytest.mark.nodes):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def across_nodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict]:
    """One ``conform`` of every broken backend of ``ACROSS_NODES`` at world size
    4 on 2 simulated nodes (one cluster for all), each on its own tests; its
    exit code, its output (``-v``: a run killed at its bound names the tests
    it finished and the one it was in) and its report's clauses."""
    report = tmp_path_factory.mktemp("nodes") / "report.json"
    backends = ",".join(f"tests.meta.broken:{b}" for b in ACROSS_NODES)
    k = " or ".join(f"(tests.meta.broken:{b}-ws4 and ({k}))" for b, k in ACROSS_NODES.items())
    env = {n: v for n, v in os.environ.items() if n != "RAY_ADDRESS"}
    code, out = run_bounded(
        [sys.executable, "-m", "harness", "conform", "--backend", backends,
         "--world-size", "4", "--nodes", "2", "--require-nodes", "-k", k, "--report-json", str(report),
         "-v", "--durations=12"],
        bound_s=ACROSS_NODES_BOUND_S, what="the conform run of the broken backends across nodes", cwd=ROOT, env=env,
    )  # fmt: skip
    assert report.exists(), out[-5000:]
    return code, out, json.loads(report.read_text())["clauses"]


def _cell(across_nodes: tuple[int, str, dict], clause: str, backend: str) -> dict:
    code, out, clauses = across_nodes
    assert code == 1, out[-5000:]
    return clauses[clause][f"tests.meta.broken:{backend} ws4 cpu 2 nodes"]  # type: ignore[no-any-return]


def _outcomes(cell: dict) -> dict[str, str]:
    """The outcome of each test of the cell that ran (not filtered out by ``-k``).
    A test may be listed twice, its call's result and a note its teardown added
    (what the first start left for good) as a pass: a failure in either is its outcome."""
    out: dict[str, str] = {}
    for t in cell["tests"]:
        if t["note"] != FILTERED_OUT:
            out[t["test"]] = "FAIL" if "FAIL" in (t["outcome"], out.get(t["test"])) else t["outcome"]
    return out


def _assert_passed(across_nodes: tuple[int, str, dict], clause: str, backend: str) -> None:
    """The tests of ``clause`` that ran for ``backend`` (at least one) all passed
    (its cell reads "not run" where others were filtered out); else the cell, whose notes say why."""
    cell = _cell(across_nodes, clause, backend)
    outcomes = _outcomes(cell)
    assert outcomes and set(outcomes.values()) == {"pass"}, f"{clause} of {backend}: {json.dumps(cell)[:4000]}"


@across
def test_a_backend_that_runs_every_rank_on_one_node_fails_c14s_node_by_node_sentence_alone(across_nodes) -> None:
    """On 2 simulated nodes, every rank packed on one node fails C14's
    node-by-node check; its other C14 check passes."""
    cell = _cell(across_nodes, "C14", "ray_ranks_on_one_node")
    text = json.dumps(cell)
    assert cell["outcome"] == "FAIL", text
    assert "the ranks run on 1 machine(s), not 2" in text, text
    outcomes = {t.split("[")[0]: o for t, o in _outcomes(cell).items()}
    assert outcomes["test_c14_ranks_run_node_by_node_on_as_many_machines_as_nodes"] == "FAIL", outcomes
    assert outcomes["test_c14_worker_rank_is_the_process_group_rank_one_process_per_rank"] == "pass", outcomes


@across
def test_a_rendezvous_through_a_file_in_tmp_fails_to_start_across_nodes_and_the_error_says_why(across_nodes) -> None:
    """Rank 0's /tmp is not the other node's: start-up never completes, and
    the failure names the start across nodes, what nodes do not share, and
    the backend's own error."""
    cell = _cell(across_nodes, "C1", "ray_rendezvous_in_tmp")
    text = json.dumps(cell)
    assert cell["outcome"] == "FAIL", text
    assert "the executor did not start on 2 nodes" in text, text
    assert "Each node has its own /tmp and /dev/shm" in text, text
    assert "could not initialise torch.distributed within init_timeout_s=30 s" in text, text


@across
def test_a_node_death_never_noticed_fails_c8s_node_sentence_and_nothing_else(across_nodes) -> None:
    """A node killed and a node cut off: the pending call must fail within
    30 s; this backend's never does. Its calls on a healthy cluster pass."""
    cell = _cell(across_nodes, "C8", "ray_node_death_unnoticed")
    outcomes = _outcomes(cell)
    # The whole cell on a failure: a test not run says why (a start that failed earlier names its error).
    assert sorted(outcomes.values()) == ["FAIL", "FAIL"], json.dumps(cell)[:4000]
    assert {t.split("[")[1].split("-")[-1].rstrip("]") for t in outcomes} == {"killed", "cut_off"}, outcomes
    for test in (t for t in cell["tests"] if t["test"] in outcomes):
        assert "when its node was" in json.dumps(test) and "did not return within 35 s" in json.dumps(test), test
    _assert_passed(across_nodes, "C1", "ray_node_death_unnoticed")


@across
def test_workers_that_outlive_a_killed_caller_on_the_nodes_fail_c13_alone(across_nodes) -> None:
    """Detached actors stay when their driver is SIGKILLed: C13's 30 s across
    nodes fails, naming what still ran; a call on a live caller passes."""
    cell = _cell(across_nodes, "C13", "ray_outlives_the_caller")
    text = json.dumps(cell)
    assert cell["outcome"] == "FAIL", text
    assert "after their caller was SIGKILLed (idle), processes it started still run" in text, text
    assert "ray::Lingering.serve) [a worker]" in text, text  # the broken backend's rank actors, named
    _assert_passed(across_nodes, "C1", "ray_outlives_the_caller")


@across
def test_a_segment_left_in_a_nodes_dev_shm_is_a_c9_leak_named_with_its_node(across_nodes) -> None:
    """Every node's /dev/shm is checked after a test, as the caller's is: what
    a rank leaves there is a C9 finding naming the node; the test itself passes."""
    c9 = _cell(across_nodes, "C9", "ray_leaves_shm_on_nodes")
    text = json.dumps(c9)
    assert c9["outcome"] == "FAIL", text
    assert "shared-memory segments left" in text, text
    assert "node 0:harness-left-" in text and "node 1:harness-left-" in text, text
    _assert_passed(across_nodes, "C1", "ray_leaves_shm_on_nodes")


@across
def test_a_worker_on_a_node_listening_on_every_interface_fails_c23(across_nodes) -> None:
    """Across nodes the node's own address is allowed, every interface is not;
    the sockets of a process on a node are read in the node's own network."""
    cell = _cell(across_nodes, "C23", "ray_undeclared_listeners")
    text = json.dumps(cell)
    assert cell["outcome"] == "FAIL", text
    # The rank's process title names its actor and the task it runs (ray::_RankActor.serve).
    assert "ray::_RankActor" in text and ") listens on every interface on [('::'" in text, text
