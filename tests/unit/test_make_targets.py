"""make test's side jobs run their tests by file (test-chaos, test-browser,
test-nodes, test-perf): every test marked chaos, browser, nodes or perf must live in the files
the Makefile names, or make test would run it nowhere (test-core leaves these
markers out). vLLM's perf tests (make vllm-perf, minutes) are named apart."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def named(variable: str) -> list[Path]:
    match = re.search(rf"^{variable} := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, f"the Makefile names no {variable}"
    return [ROOT / p for p in match[1].split()]


def marks(path: Path) -> set[str]:
    """The marker names the file's code applies (``pytest.mark.<name>``), not
    those in the text of a test project it writes."""
    return {
        node.attr
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
    }


def test_every_test_marked_for_a_side_job_is_in_the_files_its_make_target_runs() -> None:
    side_jobs = (
        ("chaos", ("CHAOS_TESTS",)),
        ("browser", ("BROWSER_TESTS",)),
        ("nodes", ("NODES_META_TESTS",)),
        ("perf", ("PERF_TESTS", "VLLM_PERF_TESTS")),
    )
    for marker, variables in side_jobs:
        paths = [p for variable in variables for p in named(variable)]
        assert all(p.exists() for p in paths), paths
        # The suite's perf marker is namespaced (harness_perf); chaos, browser and nodes are this repository's own.
        names = {marker, f"harness_{marker}"}
        marked = {f for f in (ROOT / "tests").rglob("test_*.py") if marks(f) & names}
        assert marked, f"no test is marked {marker}"
        outside = [f for f in marked if not any(f == p or p in f.parents for p in paths)]
        assert not outside, f"marked {marker} but not in {' or '.join(variables)}: {outside}"


def test_make_test_runs_every_job_the_suite_is_judged_by() -> None:
    """`make test` (what CI runs) runs each job: the suite for the built-in
    backends with the meta and unit tests (every file of tests/ the side jobs'
    markers leave), vLLM's three runs, the node tests, the chaos runs, the browser
    checks and the perf checks. A job dropped from the schedule would leave its
    cells unjudged."""
    import os
    import subprocess

    env = {**os.environ, "MAKEFLAGS": ""}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "test"],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    expected = {
        "the suite for the built-in backends": 'not nodes and not perf" --durations=20 tests/distributed',
        "the meta and the unit tests": "--ignore=tests/distributed tests",
        "the compat venv's checks": "HARNESS_COMPAT_PYTHON=",
        "vLLM's MultiprocExecutor": "--backend vllm-mp",
        "vLLM's UniProcExecutor": "--backend vllm-uni",
        "vLLM's tokens": "tests/vllm -m",
        "the node tests": "--nodes 2 --require-nodes",
        "the meta tests across nodes": "tests/meta/test_nodes_dimension.py",
        "the broken backends' chaos runs": "tests/meta/test_chaos.py",
        "the built-in backends' chaos runs": "tests/distributed/test_chaos.py",
        "the browser checks": "tests/browser",
        "the perf checks": "tests/perf",
    }
    missing = [what for what, command in expected.items() if command not in out]
    assert not missing, f"make test no longer runs: {missing}\n{out[-3000:]}"
