"""A simulated node has its own /tmp and /dev/shm: a Python or a harness there
is out of its sight, and the reason nodes cannot run names it, where a node
used to fail to start with "exec: ...python: not found"."""

from __future__ import annotations

import os
import sys

import pytest

from harness.system import nodes

#: Where each test's Python and harness are, but for what it plants: outside what
#: a node has of its own, wherever this checkout and its Python lie (a clone
#: under /tmp is itself hidden from nodes, and would be named beside the plant).
_OUTSIDE_PYTHON = "/opt/checkout/.venv/bin/python"
_OUTSIDE_HARNESS = "/opt/checkout/harness/system/nodes.py"


@pytest.fixture(autouse=True)
def _outside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", _OUTSIDE_PYTHON)
    monkeypatch.setattr(nodes, "__file__", _OUTSIDE_HARNESS)
    assert nodes.hidden_from_nodes() == [], "hidden_from_nodes judges more than this Python and harness's folder"


def test_a_python_under_tmp_is_named_with_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/tmp/checkout/.venv/bin/python")
    assert nodes.hidden_from_nodes() == ["this Python (sys.executable) /tmp/checkout/.venv/bin/python"]


def test_a_harness_imported_from_dev_shm_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodes, "__file__", "/dev/shm/ck/harness/system/nodes.py")
    assert nodes.hidden_from_nodes() == ["the folder harness is imported from /dev/shm/ck"]


def test_a_pythonpath_entry_under_tmp_is_no_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytester's subprocess runs put their own folder there: a driver's module, in the world.
    monkeypatch.setenv("PYTHONPATH", "/tmp/pytest-of-root/pytest-0/test_x0")
    assert nodes.hidden_from_nodes() == []


def test_a_link_that_leads_under_tmp_is_hidden_too(monkeypatch: pytest.MonkeyPatch) -> None:
    resolved = {"/opt/venv/bin/python": "/tmp/checkout/.venv/bin/python3.11"}
    real = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p, **kw: resolved.get(p) or real(p, **kw))
    monkeypatch.setattr(sys, "executable", "/opt/venv/bin/python")
    assert nodes.hidden_from_nodes() == ["this Python (sys.executable) /opt/venv/bin/python"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the reason names hidden paths only where root could make nodes")
def test_the_reason_nodes_cannot_run_names_what_they_cannot_see(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/tmp/ck/.venv/bin/python")
    reason = nodes.unavailable_reason()
    assert reason is not None and "/tmp/ck/.venv/bin/python" in reason and "own /tmp and /dev/shm" in reason
    with pytest.raises(RuntimeError, match=r"cannot be made here: .*sys\.executable\) /tmp/ck/\.venv/bin/python"):
        nodes.Nodes(1)
