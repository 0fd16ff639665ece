"""The unit tests of what a simulated node cannot see (a node has its own /tmp
and /dev/shm), and of processes in namespaces of their own, pass from a
checkout and a Python under /tmp as from anywhere else, and skip for no reason
of it: here they run with both made to lie there, a copy of this checkout and a
venv of this Python's packages. From a clone under /tmp they failed: the
checkout was named beside what a test planted, and a Python run after a fresh
/tmp was mounted was no longer there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.system.nodes import NODE_PRIVATE

CHECKOUT = Path(__file__).resolve().parents[2]
#: What a pytest run of the tests reads there: pytest's settings, the conftest files, the package.
CHECKOUT_FILES = ["pyproject.toml", "conftest.py", "harness", "tests"]
#: The unit tests that judge what a node would miss, or run processes in namespaces of their own.
NODE_VIEW_TESTS = ["tests/unit/test_nodes_hidden.py", "tests/unit/test_pids.py", "tests/unit/test_sockets.py"]


@pytest.fixture
def under_tmp() -> Iterator[Path]:
    """A folder in /tmp itself (not TMPDIR's, which may lie elsewhere), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="harness-checkout-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _copy_of_this_checkout(where: Path) -> Path:
    """What a run of the tests reads of this checkout, copied to ``where`` (a link
    would not do: Python imports from the current folder, which the kernel resolves)."""
    where.mkdir()
    for name in CHECKOUT_FILES:
        if (CHECKOUT / name).is_dir():
            # Not the bytecode: the runs beside this one write theirs there meanwhile.
            shutil.copytree(CHECKOUT / name, where / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(CHECKOUT / name, where / name)
    return where


def _venv_of_this_pythons_packages(where: Path) -> Path:
    """A venv at ``where`` (no pip: milliseconds) that sees this Python's packages
    (the folders on its path, less this checkout's sources: a venv inside the
    checkout, as make's ``.venv``, stays); its python."""
    venv.EnvBuilder(symlinks=True, with_pip=False).create(where)
    [site_packages] = where.glob("lib/python*/site-packages")
    sources = [CHECKOUT, *(CHECKOUT / name for name in CHECKOUT_FILES)]
    ours = [p for p in sys.path if p and os.path.isdir(p) and Path(p).resolve() not in sources]
    (site_packages / "this-pythons-packages.pth").write_text("".join(f"{p}\n" for p in ours))
    return where / "bin" / "python"


def test_the_node_view_tests_pass_from_a_checkout_and_a_python_under_tmp(under_tmp: Path) -> None:
    checkout = _copy_of_this_checkout(under_tmp / "checkout")
    python = _venv_of_this_pythons_packages(under_tmp / "venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(checkout), TMPDIR=str(under_tmp))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), *args], cwd=checkout, env=env, capture_output=True, text=True, timeout=120, check=False
        )

    # The setup is what it says: a node would miss both this Python and this harness.
    seen = run("-c", "from harness.system import nodes; print(*nodes.hidden_from_nodes(), sep='\\n')")
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.split("\n")[:2] == [
        f"this Python (sys.executable) {python}",
        f"the folder harness is imported from {checkout}",
    ], seen.stdout

    result = run("-m", "pytest", "-p", "no:cacheprovider", "-q", *NODE_VIEW_TESTS)
    output = f"from {checkout} with {python}:\n{result.stdout[-4000:]}{result.stderr[-2000:]}"
    assert result.returncode == 0, output
    # Nor skipped for it: the reason nodes cannot run here is no reason for these (-ra lists the skips).
    assert f"has its own {' and '.join(NODE_PRIVATE)}" not in result.stdout, output
