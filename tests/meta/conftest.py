"""The meta tests mostly wait on the pytest runs they start: each runs isolated,
in a process of its own, side by side with the others (``--harness-jobs``).
Those that bound how fast a run is torn down run alone; the broken-backend
cases share one module fixture, which runs its conform runs side by side
itself, so they stay in pytest's own process; so do the multi-node cases
(one conform run across simulated nodes, ``across_nodes``).

The runs they start judge SPEC's time bounds exactly (``HARNESS_EXACT_BOUNDS``),
loaded machine or not: a broken backend that never gets there fails at the
bound, not at six times it (C9's 30 s would be three minutes), and the meta
tests' time stays what the machine's load makes it. ``test_load.py`` is the
exception: it proves that a loaded machine fails no correct backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.conformance.spec_bounds import EXACT_ENV

_HERE = Path(__file__).parent
#: Module fixtures whose tests share one run: in one process, so that it runs once.
_SHARED = {"case_reports", "across_nodes"}
#: Their bounds (the run's processes gone within seconds of a signal) are about
#: the run under test, not about the machine's load.
_ALONE = {"test_interrupts.py"}
#: Its runs wait on SPEC's bounds as a user's do: stretched with the load.
_STRETCHED = {"test_load.py"}


@pytest.fixture(autouse=True, scope="module")
def _exact_spec_bounds(request: pytest.FixtureRequest) -> Iterator[None]:
    """The runs a module starts judge SPEC's bounds exactly (see above)."""
    if request.path.name in _STRETCHED:
        yield
        return
    with pytest.MonkeyPatch.context() as env:
        env.setenv(EXACT_ENV, "1")
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent != _HERE or _SHARED & set(getattr(item, "fixturenames", ())):
            continue
        item.add_marker(pytest.mark.harness_isolated)
        if item.path.name in _ALONE:
            item.add_marker(pytest.mark.harness_exclusive)
