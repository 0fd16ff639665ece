"""A command run by the tests that outlives its bound is killed with what it
started, and the failure shows what it printed until then."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.bounded import run_bounded

SCRIPT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("step 1 done; child", child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def test_a_command_past_its_bound_is_killed_with_its_children_and_its_output_is_shown(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        run_bounded([sys.executable, "-c", SCRIPT], bound_s=3, what="the sleeper", cwd=tmp_path, env=dict(os.environ))
    assert time.monotonic() - start < 30
    message = str(failure.value)
    assert message.startswith("the sleeper did not end within 3 s:"), message
    assert "step 1 done" in message, message
    child = int(message.split("child ")[1].split(maxsplit=1)[0])
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), f"its child {child} outlived it"


def test_a_command_within_its_bound_gives_its_exit_code_and_output(tmp_path: Path) -> None:
    code, out = run_bounded(
        [sys.executable, "-c", "import sys; print('hello'); sys.exit(3)"],
        bound_s=30,
        what="hello",
        cwd=tmp_path,
        env=dict(os.environ),
    )
    assert (code, out) == (3, "hello\n")
