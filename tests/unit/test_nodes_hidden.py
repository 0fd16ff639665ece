"""A simulated node has its own /tmp and /dev/shm: a Python, a harness or a
PYTHONPATH entry there is out of its sight, and the reason nodes cannot run
names it, where a node used to fail to start with "exec: ...python: not found"."""

from __future__ import annotations

import os
import sys

import pytest

from harness.system import nodes


def test_a_python_under_tmp_is_named_with_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/tmp/checkout/.venv/bin/python")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert nodes.hidden_from_nodes() == ["this Python (sys.executable) /tmp/checkout/.venv/bin/python"]


def test_pythonpath_entries_in_dev_shm_are_named_and_others_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/dev/shm/mine", "/work/ok", "/tmpfoo"]))
    hidden = nodes.hidden_from_nodes()
    assert "PYTHONPATH's entry /dev/shm/mine" in hidden
    assert not any("/work/ok" in h or "/tmpfoo" in h for h in hidden), hidden


def test_a_link_that_leads_under_tmp_is_hidden_too(monkeypatch: pytest.MonkeyPatch) -> None:
    resolved = {"/opt/venv/bin/python": "/tmp/checkout/.venv/bin/python3.11"}
    real = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p, **kw: resolved.get(p) or real(p, **kw))
    monkeypatch.setattr(sys, "executable", "/opt/venv/bin/python")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert nodes.hidden_from_nodes() == ["this Python (sys.executable) /opt/venv/bin/python"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the reason names hidden paths only where root could make nodes")
def test_the_reason_nodes_cannot_run_names_what_they_cannot_see(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/tmp/ck/.venv/bin/python")
    reason = nodes.unavailable_reason()
    assert reason is not None and "/tmp/ck/.venv/bin/python" in reason and "own /tmp and /dev/shm" in reason
    with pytest.raises(RuntimeError, match=r"cannot be made here: .*sys\.executable\) /tmp/ck/\.venv/bin/python"):
        nodes.Nodes(1)
