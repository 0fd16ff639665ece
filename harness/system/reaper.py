"""The reaper: what a test run leaves behind goes with it, however it ends.

Each isolated test runs in a process group of its own, which a Ctrl-C, a
SIGTERM or a SIGKILL of pytest does not reach. So the pytest process starts
one reaper for the run, in a session of its own, and tells it over a pipe
which test groups are running and which temporary files they use::

    pytest ── pipe: "+ <pgid> <paths>" / "- <pgid>" ──► reaper (own session)
                                                           │ end of file: pytest is gone
                                                           ▼
                    for each group still running: note the shared-memory segments its
                    processes map, SIGKILL the group, unlink those segments, remove its paths

End of file comes when pytest closes the pipe at the end of the run (nothing is
running then) or dies in any way; no other process holds the write end (a
forked test process closes its copy first thing).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from harness.system.processes import is_zombie

__all__ = ["Reaper"]

_SHM_DIR = "/dev/shm"
_SETTLE_S = 5.0


class Reaper:
    """pytest's side of the reaper: register a running test group, unregister it."""

    def __init__(self) -> None:
        read_fd, self._write_fd = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(read_fd)],
                pass_fds=(read_fd,),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
            )
        finally:
            os.close(read_fd)
        self._owner = os.getpid()

    def _send(self, line: str) -> None:
        if self._write_fd >= 0 and os.getpid() == self._owner:
            with contextlib.suppress(OSError):
                os.write(self._write_fd, line.encode() + b"\n")

    def register(self, pgid: int, paths: list[str]) -> None:
        self._send(f"+ {pgid} {json.dumps(paths)}")

    def unregister(self, pgid: int) -> None:
        self._send(f"- {pgid}")

    def close_in_child(self) -> None:
        """In a forked test process: drop the inherited write end, so that only
        pytest's death (or its close) ends the pipe."""
        if self._write_fd >= 0 and os.getpid() != self._owner:
            with contextlib.suppress(OSError):
                os.close(self._write_fd)
            self._write_fd = -1

    def close(self) -> None:
        """At the end of the run: the reaper exits (no group is running by then)."""
        if self._write_fd >= 0 and os.getpid() == self._owner:
            os.close(self._write_fd)
            self._write_fd = -1
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(_SETTLE_S + 5)


# ---- the reaper process ---------------------------------------------------------


def _members(pgid: int) -> list[int]:
    """The group's live processes. Not its zombies: the test's own process is
    pytest's child, a zombie until pytest waits for it, which it does after
    the reaping; counting it made every Ctrl-C wait the whole settle time."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(entry)) == pgid and not is_zombie(int(entry)):
                    out.append(int(entry))
    return out


def _mapped_segments(pids: list[int]) -> set[str]:
    found = set()
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                _, sep, path = line.partition(f" {_SHM_DIR}/")
                if sep:
                    found.add(path.strip().removesuffix(" (deleted)"))
    return found


def reap(pgid: int, paths: list[str]) -> None:
    """Kill a test's whole group, and what its processes started that left the
    group (found by the tag the test process set: ``leaks.tag``); remove their
    shared memory and the test's temporary files."""
    from harness.system import leaks

    escaped = leaks.tagged(f"{pgid}-", prefix=True)
    segments = _mapped_segments([*_members(pgid), *escaped])
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    for pid in escaped:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + _SETTLE_S
    while _members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    for name in segments:
        if "/" not in name:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(_SHM_DIR, name))
    for path in paths:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _main(read_fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # pytest's Ctrl-C is pytest's; this one outlives it
    running: dict[int, list[str]] = {}
    with os.fdopen(read_fd, "rb") as pipe:
        for raw in pipe:
            kind, _, rest = raw.decode(errors="replace").strip().partition(" ")
            pgid_text, _, paths_json = rest.partition(" ")
            if not pgid_text.isdigit():
                continue
            if kind == "+":
                running[int(pgid_text)] = [str(p) for p in json.loads(paths_json or "[]")]
            elif kind == "-":
                running.pop(int(pgid_text), None)
    for pgid, paths in running.items():
        reap(pgid, paths)


if __name__ == "__main__":
    _main(int(sys.argv[1]))
