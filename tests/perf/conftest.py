"""The perf tier's two forms: the quick one runs in a plain ``pytest`` and in
``make test-perf`` (make test's last step, alone: it times calls); the
full one (``perf_full``: many A/B runs, minutes) only where ``-m`` names
``perf`` (``pytest -m perf``, ``pytest -m "gpu and perf"``)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perf_full: the full form of a perf test; runs where -m names perf")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "perf" in (config.option.markexpr or ""):
        return
    full = [item for item in items if item.get_closest_marker("perf_full")]
    if full:
        config.hook.pytest_deselected(items=full)
        items[:] = [item for item in items if not item.get_closest_marker("perf_full")]
