"""``mp`` leaves nothing behind when its caller is SIGKILLed (C13, issue 25): no
ring of its in /dev/shm (their names go once every worker has attached), no
``harness-mp-*`` folder in the caller's temporary folder (the file store is a
memfd), and no worker (they die with their parent), even with a call running."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.conformance._checks import process_gone, wait_until
from harness.contract import ExecutorConfig
from harness.system.load import start_up_scale

pytestmark = pytest.mark.timeout(1200)


def _ring_names(pid: int) -> set[str]:
    """The names of the harness rings ``pid`` maps, unlinked or not."""
    names = set()
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[-1].strip() if len(line.split()) >= 6 else ""
            if path.startswith("/dev/shm/harness_ring_"):
                names.add(path.removeprefix("/dev/shm/").removesuffix(" (deleted)"))
    return names


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and /dev/shm")
@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
@pytest.mark.parametrize("state", ["idle", "call_running"])
def test_a_sigkilled_caller_leaves_no_ring_no_store_folder_and_no_worker(
    tmp_path: Path, start_method: str, state: str
) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    pid_file = tmp_path / "pids.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TMPDIR=str(tmpdir))
    # The caller's start-up bound stretches with the load, as the suite's C13
    # test passes it (beside CI's other jobs, a forkserver start took longer
    # than the unstretched bound, and the caller exited before its state).
    start_s = ExecutorConfig.init_timeout_s * start_up_scale()
    caller_err = tmp_path / "caller.err"
    driver = ["harness.conformance._orphan_driver", "mp", "2", start_method, str(pid_file), state, "1", str(start_s)]
    with caller_err.open("wb") as err:
        caller = subprocess.Popen([sys.executable, "-m", *driver], env=env, stdout=subprocess.DEVNULL, stderr=err)
    workers: list[int] = []
    rings: set[str] = set()
    try:
        reached = Path(f"{pid_file}.reached")
        started = wait_until(lambda: reached.exists() or caller.poll() is not None, start_s + 60)
        assert started, "the caller did not start"
        why = caller_err.read_text(errors="replace")[-2000:]
        assert reached.exists(), f"the caller exited {caller.poll()} before reaching {state}: {why}"
        workers = json.loads(pid_file.read_text())
        rings = _ring_names(caller.pid)
        assert rings, "the caller maps no ring: nothing to check"
        caller.kill()
        caller.wait(30)
        assert wait_until(lambda: all(process_gone(p) for p in workers), 10), "workers outlived their caller"
        left = sorted(n for n in rings if os.path.exists(f"/dev/shm/{n}"))
        assert not left, f"rings left in /dev/shm by a SIGKILLed caller: {left}"
        folders = sorted(p.name for p in tmpdir.glob("harness-mp-*"))
        assert not folders, f"store folders left in TMPDIR by a SIGKILLed caller: {folders}"
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait(30)
        for pid in workers:
            if not process_gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for name in rings:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")
