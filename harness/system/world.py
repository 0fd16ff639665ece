"""A test process joins the world of simulated nodes: the caller's machine.

A multi-node variant's test process is a driver of a cluster whose nodes are
namespaces (``harness.system.nodes``); its addresses exist only in the world's
network namespace. The process joins the world's network, host-name and mount
namespaces (its own ``/dev/shm``, where the cluster's files for drivers are),
and stays in the host's PID namespace: every process of every node, with the
host's pids, stays in sight of its fault and leak checks (a mount namespace of
its own shows them, through a ``/proc`` of the host's PIDs)::

    host PID namespace ─ pytest ─ fork ─ test process ── setns(net, uts, mnt of the world's init)
                                                       └─ unshare(mount) + /proc of the host's PIDs

Joining takes a process with one thread (mount namespaces refuse others):
call it first thing after ``fork``.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["enter"]

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWNET = 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"joining the world: {what}: {os.strerror(errno)}")


def enter(init_pid: int) -> None:
    """Join the network, host-name and mount namespaces of ``init_pid`` (the
    world's init, a host pid); keep the host's PIDs in ``/proc`` and this
    process's working folder. Raises OSError naming the step that failed."""
    libc = ctypes.CDLL(None, use_errno=True)
    cwd = os.getcwd()
    for kind, flag in (("net", _CLONE_NEWNET), ("uts", _CLONE_NEWUTS), ("mnt", _CLONE_NEWNS)):
        fd = os.open(f"/proc/{init_pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check(libc.setns(fd, flag), f"setns({kind}) of pid {init_pid}")
        finally:
            os.close(fd)
    # setns(mnt) leaves this process at the namespace's root.
    os.chdir(cwd if os.path.isdir(cwd) else "/")
    _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    # The world's /proc shows the world's PID namespace, which this process is
    # not in (its /proc/self would not exist); a proc mounted here shows the
    # PID namespace of the process mounting it: the host's.
    _check(libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), "mount proc on /proc")
