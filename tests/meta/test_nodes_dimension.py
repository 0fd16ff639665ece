"""Nodes as a variant dimension (``--harness-nodes``): a backend that does not
declare a node count reads "not applicable" there, one that declares it and
cannot be run across nodes here reads "not run" with the reason, and
``--require-nodes`` makes that a failure. The backends here construct nothing:
each test of the generated suite only reads the config the suite gives it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.system.modules import module_installed
from harness.system.nodes import unavailable_reason

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

@pytest.mark.clause("C14")
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


def _across_nodes(tmp_path: Path, backend: str, k: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """``conform`` of ``tests.meta.broken:<backend>`` at world size 4 on 2
    simulated nodes, tests ``k``; its result and its report's clauses."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "conform", "--backend", f"tests.meta.broken:{backend}",
         "--world-size", "4", "--nodes", "2", "--require-nodes", "-k", k, "--report-json", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert report.exists(), done.stdout[-3000:] + done.stderr[-2000:]
    return done, json.loads(report.read_text())["clauses"]


needs_nodes = [
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"simulated nodes: {unavailable_reason()}"),
    pytest.mark.skipif(not module_installed("ray"), reason="ray is not installed"),
]


@needs_nodes[0]
@needs_nodes[1]
def test_a_backend_that_runs_every_rank_on_one_node_fails_c14s_node_by_node_sentence_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 2 simulated nodes, every rank packed on one node fails C14's
    node-by-node check; its other C14 check passes."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    done, clauses = _across_nodes(tmp_path, "ray_ranks_on_one_node", "c14 and not cuda")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    cell = clauses["C14"]["tests.meta.broken:ray_ranks_on_one_node ws4 cpu 2 nodes"]
    text = json.dumps(cell)
    assert cell["outcome"] == "FAIL", text
    assert "the ranks run on 1 machine(s), not 2" in text, text
    outcomes = {t["test"].split("[")[0]: t["outcome"] for t in cell["tests"]}
    assert outcomes["test_c14_ranks_run_node_by_node_on_as_many_machines_as_nodes"] == "FAIL", outcomes
    assert outcomes["test_c14_worker_rank_is_the_process_group_rank_one_process_per_rank"] == "pass", outcomes
