"""signal_on_parent_death: the kernel signals a process whose parent dies, whatever the process does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from harness.system.parent_death import signal_on_parent_death

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# The parent starts a child that arms the signal (or not), ignores SIGTERM,
# prints its pid and sleeps; the test then SIGKILLs the parent.
_PARENT = textwrap.dedent(
    """
    import subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
    print(child.stdout.readline().strip(), flush=True)
    child.wait()
    """
)
_CHILD = textwrap.dedent(
    """
    import os, signal, time
    from harness.system.parent_death import signal_on_parent_death
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    armed = {arm} and signal_on_parent_death()
    print(os.getpid(), armed, flush=True)
    time.sleep(60)
    """
)


def _orphan_after_parent_killed(arm: bool) -> tuple[psutil.Process, bool]:
    with subprocess.Popen(
        [sys.executable, "-c", _PARENT, _CHILD.format(arm=arm)], stdout=subprocess.PIPE, text=True
    ) as parent:
        pid, armed = parent.stdout.readline().split()  # type: ignore[union-attr]
        child = psutil.Process(int(pid))
        os.kill(parent.pid, signal.SIGKILL)
    return child, armed == "True"


def test_a_child_that_armed_it_is_killed_when_its_parent_is_sigkilled() -> None:
    child, armed = _orphan_after_parent_killed(arm=True)
    assert armed
    gone, _ = psutil.wait_procs([child], timeout=10)
    assert gone, f"pid {child.pid} still runs 10 s after its parent was SIGKILLed"


def test_a_child_that_did_not_arm_it_outlives_its_parent() -> None:
    """The control: without the signal, the same orphan runs on (so the test above checks the signal)."""
    child, armed = _orphan_after_parent_killed(arm=False)
    try:
        assert not armed
        time.sleep(1)
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    finally:
        child.kill()


def test_it_reports_whether_it_was_armed() -> None:
    # In this process it can be armed (the signal is the default one, 0 undoes it).
    assert signal_on_parent_death(0) is True
