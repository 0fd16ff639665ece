"""A run that ends early ends everything it started: Ctrl-C, SIGTERM or SIGKILL of
pytest in the middle of a test leaves no process, shared-memory segment or
temporary file of the run behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.conformance._checks import wait_until
from tests.meta.test_plugin import _kill_tagged, _tagged

pytestmark = pytest.mark.timeout(300)

#: How long pytest may take to end after the signal: a few seconds of its own
#: summary and exit, stretched many times on a host busy with CI's other jobs.
PYTEST_EXIT_S = 60
#: How long what pytest started may outlive it: the reaper's own settling
#: (5 s at most) and the resource tracker's end, on a loaded host.
LEFT_AFTER_EXIT_S = 20

HANGS = """
import subprocess
import sys
import pytest
from harness.conformance import probes

@pytest.mark.harness_clause("C1")
def test_hangs(executor):
    # A helper that left the test's process group: only the test's tag finds it.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
    executor.collective_rpc(probes.sleep, args=(3600,))
"""


# pytest as a shell starts it: SIGINT and SIGTERM neither blocked nor ignored.
# This test runs inside the outer run, where a thread's signal mask or an
# ignored disposition can be inherited through fork and exec, and a pytest
# that cannot see SIGINT proves nothing about how pytest handles it.
_AS_FROM_A_SHELL = (
    "import os, signal, sys; "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM}); "
    "[signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)]; "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def _signals(pid: int) -> str:
    """The process's blocked and ignored signal masks, as /proc says."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return ", ".join(line.strip() for line in f if line.startswith(("SigBlk", "SigIgn")))
    except OSError:
        return "gone"


def _helpers(tag: str) -> list[int]:
    found = []
    for pid in _tagged(tag):
        try:
            if "time.sleep(3600)" in " ".join(psutil.Process(pid).cmdline()):
                found.append(pid)
        except psutil.Error:
            continue
    return found


def _described(pids: set[int]) -> list[str]:
    """Each process with its state, parent and command line: what was left, and why it might be."""
    out = []
    for pid in sorted(pids):
        try:
            p = psutil.Process(pid)
            out.append(f"{pid} ({p.status()}, parent {p.ppid()}): {' '.join(p.cmdline())[:160]}")
        except psutil.Error:
            out.append(f"{pid} (gone)")
    return out


def _mapped_shm(pids: list[int]) -> set[str]:
    names = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                names |= {line.split("/dev/shm/")[1].split()[0] for line in maps if "/dev/shm/" in line}
        except OSError:
            continue
    return names


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"]
)
def test_killing_pytest_mid_test_takes_the_test_and_its_workers_along(tmp_path: Path, signum: int) -> None:
    (tmp_path / "test_hangs.py").write_text(HANGS)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tag = os.urandom(8).hex()
    env = dict(os.environ, HARNESS_META_TAG=tag, TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    args = ["--harness-backend", "mp", "--harness-world-size", "2", "--harness-start-method", "spawn"]
    args += ["-p", "no:hypothesispytest"]  # as tests/conftest.py's pytester runs: see there
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _AS_FROM_A_SHELL,
            sys.executable,
            "-m",
            "pytest",
            "test_hangs.py",
            *args,
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The test body starts the helper once the executor (two workers) is up.
        assert wait_until(lambda: bool(_helpers(tag)), 120), f"the test did not get going: {_tagged(tag)}"
        time.sleep(2.0)  # the workers are in the call by now
        before = _tagged(tag)
        segments = _mapped_shm(before)
        assert segments, "expected the mp workers to map shared memory"
        masks = _signals(run.pid)
        run.send_signal(signum)
        # pytest's own way out (its summary, its plugins' last hooks, the
        # interpreter's exit) takes seconds, and several times that on a loaded
        # host: a hang, not a duration, is what fails here. What outlives it is
        # what the run left, bar the resource tracker and the reaper, which end
        # on the end of file pytest's exit gives them.
        ended = wait_until(lambda: run.poll() is not None, PYTEST_EXIT_S)
        gone = ended and wait_until(lambda: not _tagged(tag), LEFT_AFTER_EXIT_S)
        left = _described(_tagged(tag))
    finally:
        _kill_tagged(tag)
        run.wait(30)
    name = signal.Signals(signum).name
    assert ended, f"pytest was still running {PYTEST_EXIT_S} s after {name}: " + "; ".join(left)
    assert gone, (
        f"processes of the run left {LEFT_AFTER_EXIT_S} s after pytest ended on {name} "
        f"(pytest's signals before it: {masks}): " + "; ".join(left)
    )
    assert wait_until(lambda: not [s for s in segments if os.path.exists(f"/dev/shm/{s}")], 5), (
        f"shared memory left: {[s for s in segments if os.path.exists(f'/dev/shm/{s}')]}"
    )
    leftovers = [p.name for p in tmp.iterdir()]
    assert not [n for n in leftovers if n.startswith("harness-")], f"temporary files left: {leftovers}"
