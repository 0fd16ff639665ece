"""The plugin's state for a run, kept in ``config.stash`` (and an item's or the
session's): one key each, shared by the hooks (``__init__``) and the fixtures.
The keys one module alone reads stay with it: an isolated test's world and
/dev/shm (``isolation``), a test's known failure and leak entry (``expected``)."""

from __future__ import annotations

import pytest

from harness.pytest_plugin.options import Options
from harness.pytest_plugin.outcomes import MatrixCollector
from harness.pytest_plugin.sessions import Sessions
from harness.report import ClauseMatrix
from harness.system.reaper import Reaper

__all__ = [
    "collector_key",
    "isolated_key",
    "matrix_key",
    "missing_key",
    "options_key",
    "reaper_key",
    "sessions_key",
]

matrix_key = pytest.StashKey[ClauseMatrix]()
options_key = pytest.StashKey[Options]()
sessions_key = pytest.StashKey[Sessions]()
collector_key = pytest.StashKey[MatrixCollector]()
reaper_key = pytest.StashKey[Reaper]()
#: On an item: why its test must fail before it runs (GPUs or nodes a --require-* option demands are missing).
missing_key = pytest.StashKey[str]()
#: On the session: whether it has tests that run isolated (the plugin's own to run).
isolated_key = pytest.StashKey[bool]()
