"""What a process holds that an executor could leak: children, threads, shared
memory, listening sockets, file descriptors. Snapshots taken before and after a
test are compared by the plugin; nothing here knows any backend's internals.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import psutil

__all__ = ["Snapshot", "baseline", "diff", "listening_sockets", "shm_segments", "snapshot", "wait_clean"]

_SHM_DIR = "/dev/shm"
_LOOPBACK_PREFIXES = ("127.", "::1", "::ffff:127.")


def shm_segments() -> set[str]:
    """POSIX shared-memory segments of this user (Linux: /dev/shm). Other users'
    segments are no executor's of ours, whatever they are doing meanwhile."""
    uid = os.getuid()
    out: set[str] = set()
    try:
        names = os.listdir(_SHM_DIR)
    except FileNotFoundError:  # not Linux: nothing we can list
        return out
    for name in names:
        try:
            if os.stat(os.path.join(_SHM_DIR, name)).st_uid == uid:
                out.add(name)
        except FileNotFoundError:
            continue
    return out


def listening_sockets(pid: int | None = None) -> list[tuple[str, int]]:
    """(address, port) of TCP sockets listening, and UDP sockets bound, in ``pid``."""
    proc = psutil.Process(pid)
    out = []
    for conn in proc.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN or (conn.type == 2 and conn.laddr):  # 2: SOCK_DGRAM
            out.append((conn.laddr.ip, conn.laddr.port))
    return out


def _mapped_outside_this_tree(name: str) -> bool:
    """True if a process other than this one and its descendants maps the segment:
    then it is someone else's (another run on the machine), not our leak."""
    ours = {os.getpid()} | {c.pid for c in psutil.Process().children(recursive=True)}
    needle = f"{_SHM_DIR}/{name}"
    for pid_dir in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not pid_dir.isdigit() or int(pid_dir) in ours:
            continue
        try:
            with open(f"/proc/{pid_dir}/maps", encoding="utf-8", errors="replace") as maps:
                if needle in maps.read():
                    return True
        except OSError:
            continue
    return False


def is_loopback(address: str) -> bool:
    return address.startswith(_LOOPBACK_PREFIXES)


@dataclass
class Snapshot:
    children: set[int] = field(default_factory=set)
    threads: set[int] = field(default_factory=set)
    shm: set[str] = field(default_factory=set)
    listening: set[tuple[str, int]] = field(default_factory=set)
    fds: int = 0


def _children() -> set[int]:
    # A zombie counts: a child nobody reaped is a leak too.
    return {child.pid for child in psutil.Process().children(recursive=True)}


#: The name prefix of the suite's own watchdog threads (``harness.conformance._checks.bounded``):
#: one left waiting on a hung backend call is the suite's, not a thread the backend leaked.
SUITE_THREAD_PREFIX = "harness-watchdog"


def snapshot() -> Snapshot:
    proc = psutil.Process()
    return Snapshot(
        children=_children(),
        threads={
            t.ident for t in threading.enumerate() if t.ident is not None and not t.name.startswith(SUITE_THREAD_PREFIX)
        },
        shm=shm_segments(),
        listening=set(listening_sockets()),
        fds=proc.num_fds() if hasattr(proc, "num_fds") else 0,
    )


def baseline() -> Snapshot:
    """A snapshot to compare with after a test. Starts what Python itself keeps
    for the whole process first (multiprocessing's resource tracker), so that
    it does not count as the test's."""
    import gc
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    gc.collect()
    return snapshot()


def diff(before: Snapshot, after: Snapshot, fd_slack: int | None = 0) -> list[str]:
    """What ``after`` holds that ``before`` did not, worded for a failure message.
    ``fd_slack=None`` leaves descriptors out (see ``wait_clean``)."""
    problems = []
    new_children = after.children - before.children
    if new_children:
        described = []
        for pid in sorted(new_children):
            try:
                p = psutil.Process(pid)
                described.append(f"pid {pid} ({p.status()}: {' '.join(p.cmdline())[:120]})")
            except psutil.NoSuchProcess:
                described.append(f"pid {pid}")
        problems.append("child processes left: " + "; ".join(described))
    new_threads = after.threads - before.threads
    if new_threads:
        names = [t.name for t in threading.enumerate() if t.ident in new_threads]
        problems.append(f"threads left in the caller: {names}")
    new_shm = {name for name in after.shm - before.shm if not _mapped_outside_this_tree(name)}
    if new_shm:
        problems.append(f"shared-memory segments left: {sorted(new_shm)}")
    new_listening = after.listening - before.listening
    if new_listening:
        problems.append(f"listening sockets left: {sorted(new_listening)}")
    if fd_slack is not None and after.fds > before.fds + fd_slack:
        problems.append(f"file descriptors: {before.fds} before, {after.fds} after")
    return problems


def wait_clean(before: Snapshot, timeout: float = 5.0, fd_slack: int | None = 0) -> list[str]:
    """Leaks still present after up to ``timeout`` s (reaping takes a moment).

    ``fd_slack=None`` does not count descriptors: a runtime's first start in a
    process (Ray's driver, CUDA) keeps some for the life of the process, which
    only a comparison after a warm-up cycle can tell from a leak (C10 does that).
    """
    deadline = time.monotonic() + timeout
    while True:
        problems = diff(before, snapshot(), fd_slack)
        if not problems or time.monotonic() >= deadline:
            return problems
        time.sleep(0.1)
