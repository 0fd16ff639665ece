"""This repository's own tests. The harness plugin itself loads through its
pytest11 entry point (the package is installed); pytester runs the plugin's
tests on small generated test files."""

from __future__ import annotations

import contextlib
import getpass
import os
import tempfile

import pytest

pytest_plugins = ["pytester"]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A green run removes its own base temporary folder (``tmp_path_retention_policy``),
    but not the ``pytest-of-<user>`` folder that holds it: removed too where it is
    empty, so that ``make test`` leaves the temporary folder as it found it."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller's folder
    with contextlib.suppress(OSError, KeyError):
        os.rmdir(os.path.join(tempfile.gettempdir(), f"pytest-of-{getpass.getuser()}"))
