"""What a test's processes left on the machine, named against that test, and removed.

Each isolated test gets a temporary folder of its own (``TMPDIR`` for every
process it starts) and, where the platform allows it (root: a mount namespace
of its own with a fresh tmpfs on ``/dev/shm``), a ``/dev/shm`` of its own. So
whatever is found there after the test is that test's, even with tests side
by side, and nothing of it can outlive the test. Where a private ``/dev/shm``
is not allowed, the test's segments are told by a diff (new since the test
began, mapped by no process outside the machine's others), which side-by-side
tests can blur: the report says which way the run went.

::

    test process: enter_private_shm()? ── test ── what_was_left() ── remove()
                         │ no (not root)                │
                         └─ shm_before = segments now ──┘ (diff)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from harness.system import leaks
from harness.system.leaks import PYTEST_TMP_PREFIX, SEMAPHORE_PREFIX, SHM_DIR

__all__ = ["Leftovers", "enter_private_shm", "is_semaphore", "remove", "what_was_left"]

_CLONE_NEWNS = 0x00020000
#: How long a shared /dev/shm's new, unmapped entries must stay so to count as a test's.
_SETTLE_S = 2.0
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 1 << 14, 1 << 18


def is_semaphore(name: str) -> bool:
    return name.startswith(SEMAPHORE_PREFIX)


def enter_private_shm(carry: tuple[str, ...] = ()) -> str | None:
    """Give this process (and all it starts from now on) a ``/dev/shm`` of its
    own: a new mount namespace with a fresh tmpfs there, gone with its last
    process, with the entries ``carry`` of the one before bound into it (a
    cluster's files a driver needs). Returns None on success, else why not (not
    root, no namespaces)."""
    if not hasattr(os, "fork") or not os.path.isdir(SHM_DIR):
        return f"{SHM_DIR} is not there"
    if os.geteuid() != 0:
        return "not root: mount namespaces need it"
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    try:
        check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        # Mounts made here must not propagate back to the machine's namespace.
        check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
        # Held open across the mount that hides them, then bound back by fd.
        held = {name: os.open(os.path.join(SHM_DIR, name), os.O_PATH | os.O_CLOEXEC) for name in carry}
        check(
            libc.mount(b"harness-shm", SHM_DIR.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=1777"),
            f"mount tmpfs on {SHM_DIR}",
        )
        for name, fd in held.items():
            target = os.path.join(SHM_DIR, name)
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.mkdir(target)
            else:
                open(target, "x").close()
            check(libc.mount(f"/proc/self/fd/{fd}".encode(), target.encode(), None, _MS_BIND, None), f"bind {target}")
            os.close(fd)
    except (OSError, AttributeError) as exc:
        return str(exc)
    return None


@dataclass
class Leftovers:
    """What one test's processes left: segments (name -> bytes), named
    semaphores, entries of its temporary folder, and processes killed after it."""

    segments: dict[str, int] = field(default_factory=dict)
    semaphores: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    processes: int = 0

    def __bool__(self) -> bool:
        return bool(self.segments or self.semaphores or self.files or self.processes)

    def to_json(self) -> dict[str, Any]:
        return {
            "segments": len(self.segments),
            "bytes": sum(self.segments.values()),
            "semaphores": len(self.semaphores),
            "files": len(self.files),
            "processes": self.processes,
        }


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def what_was_left(
    tmp_dir: str, shm_before: set[str] | None, ours: set[int] | None = None, carried: tuple[str, ...] = ()
) -> Leftovers:
    """What is in ``tmp_dir`` (pytest's own folders aside) and in ``/dev/shm``:
    all of it where ``shm_before`` is None (a private ``/dev/shm``), else what
    is new since ``shm_before`` and mapped by no process outside ``ours``;
    never the entries ``carried`` into a private one."""
    left = Leftovers()
    with contextlib.suppress(OSError):
        left.files = sorted(n for n in os.listdir(tmp_dir) if not n.startswith(PYTEST_TMP_PREFIX))
    names = leaks.shm_segments(include_semaphores=True) - set(carried)
    if shm_before is not None:
        ours = ours or {os.getpid()}
        names = {n for n in names - shm_before if not leaks.mapped_outside(n, ours)}
        if names:
            # A test beside this one may have just made them and not yet opened
            # them (a raylet makes a graph's semaphores, its processes open them
            # after): what is still there, still unmapped, a moment later is ours.
            time.sleep(_SETTLE_S)
            now = leaks.shm_segments(include_semaphores=True)
            names = {n for n in names & now if not leaks.mapped_outside(n, ours)}
    for name in sorted(names):
        if is_semaphore(name):
            left.semaphores.append(name)
        else:
            left.segments[name] = _size(os.path.join(SHM_DIR, name))
    return left


def remove(left: Leftovers, tmp_dir: str) -> None:
    """Remove what :func:`what_was_left` found (the processes are the caller's to kill)."""
    for name in [*left.segments, *left.semaphores]:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(SHM_DIR, name))
    for name in left.files:
        path = os.path.join(tmp_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
