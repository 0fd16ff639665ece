"""Fixtures every tier of the suite's own tests shares."""

from __future__ import annotations

import pytest


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's Pytester, whose runs leave Hypothesis's pytest plugin out.

    Where Hypothesis is installed (the chaos tier's), its plugin imports it whole
    at the end of every pytest run, about 1 s of CPU, and no run a test starts
    uses it. Pytester clears ``PYTEST_ADDOPTS`` when it starts; this sets it after."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    return pytester
