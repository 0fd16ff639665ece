"""The public API of the harness package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import harness

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_every_name_in_all_exists() -> None:
    missing = [name for name in harness.__all__ if not hasattr(harness, name)]
    assert missing == []
    assert len(set(harness.__all__)) == len(harness.__all__)
    assert all(isinstance(name, str) for name in harness.__all__)


def test_star_import_gives_all() -> None:
    namespace: dict[str, object] = {}
    exec("from harness import *", namespace)
    assert set(harness.__all__) <= set(namespace)


def test_importing_harness_does_not_import_torch() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import harness, sys; print('torch' in sys.modules)"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_version() -> None:
    assert isinstance(harness.__version__, str)
    assert harness.__version__
