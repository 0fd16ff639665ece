"""Installing harness changes nothing for tests it does not own.

The plugin loads through its ``pytest11`` entry point wherever the package is
installed, so it must leave alone how pytest, pytest-xdist and pytest-forked
run a user's plain tests; and the suite itself works under xdist, with its
matrix gathered on the controller.

Two environments: this one (the newest pytest the requirements allow), and
``.venv-compat`` (``make install-compat``: harness from a wheel in a fresh
venv, beside pytest 7.4, the requirements' floor, pytest-xdist and
pytest-forked), named by ``HARNESS_COMPAT_PYTHON``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

PLAIN = """
import os

def test_one():
    assert 1 + 1 == 2

def test_two():
    assert os.getpid() > 0
"""

COMPAT_ENV = "HARNESS_COMPAT_PYTHON"


def _run(python: str, args: list[str], cwd: Path) -> tuple[int, str]:
    """``python -m pytest ARGS`` in ``cwd`` (no conftest of this repository), its status and output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HARNESS_"))}
    done = subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def _summary(output: str) -> str:
    return output.strip().splitlines()[-1]


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    (tmp_path / "test_plain.py").write_text(PLAIN)
    return tmp_path


@pytest.fixture
def compat_python() -> str:
    python = os.environ.get(COMPAT_ENV)
    if not python:
        pytest.skip(f"{COMPAT_ENV} is not set: `make install-compat` builds .venv-compat (make test-core sets it)")
    assert os.access(python, os.X_OK), f"{COMPAT_ENV}={python!r} names no interpreter: run `make install-compat`"
    return python


def _harness_is_loaded(python: str, cwd: Path) -> None:
    """The plugin is registered there: what follows checks it, not a pytest without it."""
    _, plugins = _run(python, ["--version", "--version"], cwd)
    assert "executor-harness" in plugins, plugins


# --------------------------------------------------------------------------- this environment


def test_a_plain_file_under_xdist_runs_every_test(plain: Path) -> None:
    _harness_is_loaded(sys.executable, plain)
    code, output = _run(sys.executable, ["-n", "2", "test_plain.py"], plain)
    assert (code, "2 passed" in _summary(output)) == (0, True), output


#: The suite for `uni` at world size 1, on two xdist workers.
SUITE_UNDER_XDIST = [
    "-n",
    "2",
    "--pyargs",
    "harness.conformance",
    "--harness-backend",
    "uni",
    "--harness-world-size",
    "1",
]


def test_the_suite_under_xdist_runs_each_test_in_a_worker_and_the_controller_prints_the_matrix(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    code, output = _run(
        sys.executable,
        [*SUITE_UNDER_XDIST, "-k", "c1_ or c3_", "--harness-report-json", str(report), "-m", "not gpu"],
        tmp_path,
    )
    assert code == 0, output
    assert "created: 2/2 workers" in output
    assert "harness conformance: clause x backend" in output
    matrix = json.loads(report.read_text())
    assert matrix["run"] == "finished"
    assert {c: cells["uni ws1 cpu"]["outcome"] for c, cells in matrix["clauses"].items() if c in ("C1", "C3")} == {
        "C1": "pass",
        "C3": "pass",
    }
    # The controller knows what its workers filtered out.
    assert matrix["clauses"]["C9"]["uni ws1 cpu"]["outcome"] == "not run"


def test_under_xdist_a_run_that_checked_nothing_still_fails(tmp_path: Path) -> None:
    code, output = _run(sys.executable, [*SUITE_UNDER_XDIST, "-k", "no_such_test_anywhere"], tmp_path)
    # Exit status 5, as without xdist: pytest's own for a run whose every test was filtered out.
    assert code == pytest.ExitCode.NO_TESTS_COLLECTED, output
    assert "NOTHING CHECKED for backend 'uni': no test of it was selected" in output, output


# --------------------------------------------------------------------------- a user's environment, from a wheel


def test_from_a_wheel_a_plain_file_runs_under_xdist_and_under_forked(compat_python: str, plain: Path) -> None:
    _harness_is_loaded(compat_python, plain)
    for args in (["-n", "2"], ["--forked"], []):
        code, output = _run(compat_python, [*args, "test_plain.py"], plain)
        assert (code, "2 passed" in _summary(output)) == (0, True), f"pytest {' '.join(args)}:\n{output}"


def test_the_wheel_carries_the_documents_errors_cite(compat_python: str, tmp_path: Path) -> None:
    from harness.contract import SHIPPED_DOCS, SHIPPED_SOURCES

    done = subprocess.run(
        [compat_python, "-m", "harness", "docs"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    listed = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert sorted(listed) == sorted(SHIPPED_DOCS)
    root = Path(__file__).resolve().parents[2]
    for name, path in listed.items():
        assert "site-packages" in path, f"{name} read from {path}, not from the installed wheel"
        assert Path(path).read_bytes() == (root / SHIPPED_SOURCES[name]).read_bytes(), f"{name} in the wheel is stale"
    wheels = list((Path(compat_python).parents[1] / "wheel").glob("*.whl"))
    assert len(wheels) == 1, wheels
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert {f"harness/_docs/{n}" for n in SHIPPED_DOCS} <= set(names)
