"""C23's network-namespace run says why it did not run, and starts nothing then."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness import ExecutorConfig
from harness.conformance import _netns


def test_without_unshare_the_namespace_run_says_why_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_which = _netns.shutil.which
    monkeypatch.setattr(_netns.shutil, "which", lambda tool: None if tool == "unshare" else real_which(tool))

    def no_process(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing may start when no namespace can be made")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(subprocess, "run", no_process)
    outcome = _netns.run("mp", ExecutorConfig(2), tmp_path, 60)
    assert outcome.exposure is None and not outcome.error
    assert "unshare not found" in outcome.unavailable
    assert "unshare not found" in _netns.unavailable()


def test_host_resolution_names_the_host_and_its_addresses() -> None:
    text = _netns.host_resolution()
    assert text.startswith(f"host name {socket.gethostname()!r} ")
