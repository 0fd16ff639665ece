"""The meta tests mostly wait on the pytest runs they start: each runs isolated,
in a process of its own, side by side with the others (``--harness-jobs``).
Those that bound how fast a run is torn down run alone; the broken-backend
cases share one module fixture, which runs its conform runs side by side
itself, so they stay in pytest's own process; so do the multi-node cases
(one conform run across simulated nodes, ``across_nodes``)."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent
#: Module fixtures whose tests share one run: in one process, so that it runs once.
_SHARED = {"case_reports", "across_nodes"}
#: Their bounds (the run's processes gone within seconds of a signal) are about
#: the run under test, not about the machine's load.
_ALONE = {"test_interrupts.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent != _HERE or _SHARED & set(getattr(item, "fixturenames", ())):
            continue
        item.add_marker(pytest.mark.isolated)
        if item.path.name in _ALONE:
            item.add_marker(pytest.mark.exclusive)
