"""The reaper counts a test group's live processes, not its zombies: the test's
own process stays a zombie until pytest waits for it, after the reaping."""

from __future__ import annotations

import os
import signal
import time

from harness.system.processes import is_zombie
from harness.system.reaper import _members


def test_a_zombie_is_not_a_member_of_its_group() -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.setpgid(0, 0)
        signal.pause()
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while os.getpgid(pid) != pid and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _members(pid) == [pid] and not is_zombie(pid)
        os.kill(pid, signal.SIGKILL)
        while not is_zombie(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert is_zombie(pid), "the killed child never became a zombie"
        assert _members(pid) == []
    finally:
        if not is_zombie(pid):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
