"""What a process holds that an executor could leak: the processes it started,
threads, shared memory, listening sockets, file descriptors. Snapshots taken
before and after a test are compared by the plugin; nothing here knows any
backend's internals.

The processes an executor started are found by what they inherit from the
caller, not by what the backend reports: the caller's descendants, and every
process that carries the caller's *tag* (:func:`tag`), also one that left the
tree (a new session, a double fork): the tag is an environment variable, read
back from ``/proc/<pid>/environ`` (which shows the environment a process was
exec'ed with), plus a marker descriptor for children forked without an exec
(whose ``environ`` still shows the caller's original environment). A backend
whose processes inherit neither (Ray's actors are started by its raylet) is
judged on the pids its workers report, which callers add to the set.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

from harness.system.processes import is_zombie

__all__ = [
    "TAG_ENV",
    "Snapshot",
    "baseline",
    "describe",
    "diff",
    "ended_connections",
    "is_node_segment",
    "lasting_leaks",
    "listening_sockets",
    "mapped_outside",
    "new_segments",
    "new_tag",
    "new_thread_names",
    "shm_mapped_by",
    "shm_path",
    "shm_segments",
    "snapshot",
    "started_by",
    "tag",
    "tagged",
    "wait_clean",
    "watch_nodes",
]

#: The environment variable that marks the processes started from a tagged caller.
TAG_ENV = "HARNESS_LEAK_TAG"
_MARKER_PREFIX = "harness-tag-"

SHM_DIR = "/dev/shm"
#: POSIX named semaphores live in /dev/shm under this prefix (glibc).
SEMAPHORE_PREFIX = "sem."
#: pytest's own temporary folders (tmp_path): the suite's, never a backend's.
PYTEST_TMP_PREFIX = "pytest-of-"
_LOOPBACK_PREFIXES = ("127.", "::1", "::ffff:127.")


#: Other machines in sight, which an executor may leave things on: the
#: simulated nodes of a multi-node variant, by name ("node 1"), each the host
#: pid of its init (its files are under ``/proc/<pid>/root``). Set by
#: :func:`watch_nodes`.
_nodes: dict[str, int] = {}
#: Processes a Ray node keeps in a pool for any driver ("ray::IDLE"): the
#: cluster's, not an executor's.
_CLUSTER_POOL = ("ray::IDLE",)


def watch_nodes(inits: Mapping[str, int]) -> None:
    """Check the machines ``inits`` names too (name -> host pid of its init):
    each one's ``/dev/shm``, temporary folder and processes."""
    _nodes.clear()
    _nodes.update(inits)


def _folders(folder: str) -> list[tuple[str, str]]:
    """``folder`` here, and on every watched node: (name prefix, path)."""
    return [("", folder)] + [(f"{name}:", f"/proc/{init}/root{folder}") for name, init in sorted(_nodes.items())]


def _bare(name: str) -> str:
    """A segment's name on its own machine: ``node 1:x`` is ``x``."""
    for node in _nodes:
        if name.startswith(node + ":"):
            return name[len(node) + 1 :]
    return name


def shm_path(name: str) -> str:
    """Where this process reaches the segment :func:`shm_segments` calls ``name``."""
    for node, init in _nodes.items():
        if name.startswith(node + ":"):
            return f"/proc/{init}/root{SHM_DIR}/{name[len(node) + 1 :]}"
    return os.path.join(SHM_DIR, name)


def shm_segments(include_semaphores: bool = False) -> set[str]:
    """POSIX shared-memory segments of this user (Linux: /dev/shm), here and on
    every watched node (named ``node 1:<name>``); with ``include_semaphores``,
    named semaphores (``sem.*``, in the same folder) too. Other users' segments
    are no executor's of ours, whatever they are doing meanwhile."""
    uid = os.getuid()
    out: set[str] = set()
    for prefix, folder in _folders(SHM_DIR):
        try:
            names = os.listdir(folder)
        except OSError:  # not Linux (nothing we can list), or a node gone
            continue
        for name in names:
            if name.startswith(SEMAPHORE_PREFIX) and not include_semaphores:
                continue
            try:
                if os.stat(os.path.join(folder, name)).st_uid == uid:
                    out.add(prefix + name)
            except OSError:
                continue
    return out


def semaphores() -> set[str]:
    """POSIX named semaphores of this user (``/dev/shm/sem.<name>``)."""
    return {n for n in shm_segments(include_semaphores=True) if _bare(n).startswith(SEMAPHORE_PREFIX)}


def temp_entries() -> set[str]:
    """The entries of this process's temporary folder (``tempfile.gettempdir()``;
    a test's own, under the suite), pytest's own folders aside: where an
    executor's processes put their files and unix sockets."""
    import sys
    import tempfile

    # multiprocessing's folder for this process (its fork server's socket): the
    # process's for its whole life, as its fork server is (see _python_helpers).
    mp_process = sys.modules.get("multiprocessing.process")
    own = getattr(mp_process.current_process(), "_config", {}).get("tempdir") if mp_process else None
    try:
        names = os.listdir(tempfile.gettempdir())
    except OSError:
        return set()
    return {n for n in names if not n.startswith(PYTEST_TMP_PREFIX) and n != os.path.basename(own or "")}


# (pid that set it, the tag, its marker descriptor)
_tag_state: tuple[int, str, int | None] | None = None


def new_tag() -> str:
    """A fresh tag, for a caller this process starts itself (pass it as ``TAG_ENV``)."""
    return f"{os.getpid()}-{secrets.token_hex(8)}"


def tag() -> str:
    """Tag this process, so that every process started from it from now on can be
    found (:func:`tagged`); returns the tag. Idempotent within a process; a
    forked child (each isolated test) gets a tag of its own on its first call."""
    global _tag_state
    if _tag_state is not None and _tag_state[0] == os.getpid():
        return _tag_state[1]
    if _tag_state is not None and _tag_state[2] is not None:
        try:  # the parent's marker: what this process starts is not the parent's
            os.close(_tag_state[2])
        except OSError:
            pass
    value = new_tag()
    marker: int | None = None
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        # Close-on-exec: an exec'ed child carries the environment variable instead.
        marker = memfd_create(_MARKER_PREFIX + value, getattr(os, "MFD_CLOEXEC", 1))
    os.environ[TAG_ENV] = value
    _tag_state = (os.getpid(), value, marker)
    return value


def _current_tag() -> str | None:
    return _tag_state[1] if _tag_state is not None and _tag_state[0] == os.getpid() else None


def tagged(value: str, prefix: bool = False) -> set[int]:
    """Pids of the live processes (this one aside) that carry the tag ``value``
    (with ``prefix``: any tag that starts with it, e.g. ``"<pid>-"`` for the tags
    process ``pid`` set)."""
    if not os.path.isdir("/proc"):
        return set()
    needle = f"{TAG_ENV}={value}".encode()
    marker = _MARKER_PREFIX + value
    out: set[int] = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                entries = f.read().split(b"\0")
                if needle in entries or (prefix and any(e.startswith(needle) for e in entries)):
                    out.add(int(entry))
                    continue
        except OSError:  # gone, or another user's
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if marker in os.readlink(f"/proc/{entry}/fd/{fd}"):
                    out.add(int(entry))
                    break
            except OSError:
                continue
    return {pid for pid in out if not is_zombie(pid)}


def started_by(pid: int, value: str | None) -> set[int]:
    """The processes ``pid`` started, directly or not, as far as they can be told:
    its descendants now, and the processes that carry its tag ``value`` (if any)
    wherever they are in the process tree. ``pid`` itself is not included."""
    try:
        out = {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        out = set()
    if value is not None:
        out |= tagged(value)
    out.discard(pid)
    return out


def describe(pid: int) -> str:
    """``pid 123 (sleeping: python -m x)``, for a failure message."""
    try:
        p = psutil.Process(pid)
        command = " ".join(" ".join(p.cmdline()).split())  # one line, however the arguments break
        return f"pid {pid} ({p.status()}: {command[:120]})"
    except psutil.Error:
        return f"pid {pid}"


def shm_mapped_by(pids: Iterable[int]) -> set[str]:
    """Names of the shared-memory segments (still linked in /dev/shm) that any of
    ``pids`` has mapped: whatever created them, they are in use by those processes."""
    out: set[str] = set()
    prefix = SHM_DIR + "/"
    for pid in pids:
        try:
            node = _node_of(pid)
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    fields = line.split(None, 5)  # address perms offset dev inode [path]
                    path = fields[5].strip() if len(fields) == 6 else ""
                    if path.startswith(prefix) and not path.endswith("(deleted)"):
                        out.add(node + path[len(prefix) :])
        except OSError:
            continue
    return out


def is_node_segment(name: str) -> bool:
    """Whether :func:`shm_segments` found ``name`` on a watched node."""
    return _bare(name) != name


def _node_of(pid: int) -> str:
    """The name prefix of the watched node ``pid`` runs on ("node 1:"), or ""
    for this machine: the node whose mount namespace (so /dev/shm) it shares."""
    if not _nodes:
        return ""
    mine = os.stat(f"/proc/{pid}/ns/mnt").st_ino
    for node, init in _nodes.items():
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{init}/ns/mnt").st_ino == mine:
                return node + ":"
    return ""


def listening_sockets(pid: int | None = None) -> list[tuple[str, int]]:
    """(address, port) of TCP sockets listening, and UDP sockets bound, in ``pid``
    (in its own network: a node's process, in the node's). Raises psutil.Error
    where the process is gone or not ours to look at."""
    from harness.system.sockets import bound_sockets

    target = os.getpid() if pid is None else pid
    try:
        return bound_sockets(target)
    except FileNotFoundError:
        raise psutil.NoSuchProcess(target) from None
    except PermissionError:
        raise psutil.AccessDenied(target) from None


def mapped_outside(name: str, ours: set[int]) -> bool:
    """True if a process other than ``ours`` (this one and what it started) maps
    the segment: then it is someone else's (another run on the machine), not our leak.
    A node's segment (``node 1:x``): a process there that maps it is another
    test's, driving the same simulated cluster (the caller runs on no node)."""
    needle = f"{SHM_DIR}/{_bare(name)}"
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
    #: The processes this one started (``started_by``): descendants and tagged ones.
    children: set[int] = field(default_factory=set)
    threads: set[int] = field(default_factory=set)
    shm: set[str] = field(default_factory=set)
    listening: set[tuple[str, int]] = field(default_factory=set)
    fds: int = 0
    #: What each descriptor is (``/proc/self/fd``'s link): a failure names the new ones.
    fd_targets: dict[int, str] = field(default_factory=dict)
    semaphores: set[str] = field(default_factory=set)
    #: Entries of the temporary folder (files, folders, unix sockets).
    temp: set[str] = field(default_factory=set)


def _python_helpers() -> set[int]:
    """Processes Python's multiprocessing keeps for the life of this process once
    started: the resource tracker, the forkserver. Not an executor's to stop
    (another user of multiprocessing in the caller shares them); C13 still
    requires them to exit with the caller, which they do."""
    import sys

    out: set[int] = set()
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    server = sys.modules.get("multiprocessing.forkserver")
    for module, holder, attr in ((tracker, "_resource_tracker", "_pid"), (server, "_forkserver", "_forkserver_pid")):
        pid = getattr(getattr(module, holder, None), attr, None)
        if isinstance(pid, int):
            out.add(pid)
    return out


def _children() -> set[int]:
    # A zombie child counts: a child nobody reaped is a leak too (zombies that
    # left the tree are init's to reap, and ``tagged`` leaves them out).
    return started_by(os.getpid(), _current_tag()) - _python_helpers()


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
        fd_targets=fd_targets(),
        semaphores=semaphores(),
        temp=temp_entries(),
    )


def fd_targets() -> dict[int, str]:
    """This process's descriptors and what each refers to (a path, ``socket:[inode]``,
    ``anon_inode:[eventfd]``, ...); empty where ``/proc`` is not there."""
    out: dict[int, str] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except (OSError, ValueError):
            continue  # closed meanwhile (the listing's own descriptor among them)
    return out


def _new_fd_targets(before: Snapshot, after: Snapshot) -> dict[int, str]:
    """The descriptors of ``after`` that ``before`` did not have, or had for something else."""
    return {fd: t for fd, t in after.fd_targets.items() if before.fd_targets.get(fd) != t}


def new_descriptors(before: Snapshot, after: Snapshot) -> list[str]:
    """The descriptors of ``after`` that ``before`` did not have (or had for
    something else), as ``fd -> target``, sockets with their addresses."""
    new = _new_fd_targets(before, after)
    if not new:
        return []
    ends: dict[int, str] = {}
    try:
        for c in psutil.Process().net_connections(kind="all"):
            if c.fd in new:
                ends[c.fd] = f" {c.laddr or '-'} -> {c.raddr or '-'} {c.status}".rstrip()
    except (psutil.Error, OSError):
        pass
    for fd, t in new.items():
        if fd not in ends and t.startswith("socket:"):
            ends[fd] = _socket_kind(fd)
    return [f"{fd} -> {t}{ends.get(fd, '')}" for fd, t in sorted(new.items())]


@contextlib.contextmanager
def _copy_of_socket(fd: int) -> Iterator[Any]:
    """A socket object on a copy of descriptor ``fd`` (None where it cannot be
    had), closed after: asking it leaves the process's own descriptor alone."""
    import socket

    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        yield None
        return
    try:
        yield sock
    finally:
        sock.close()


def _socket_kind(fd: int) -> str:
    """A socket that psutil does not list (no address: a TCP socket whose
    connection has ended, a netlink socket, ...), told by its family and type,
    and by whether it still has a peer."""
    with _copy_of_socket(fd) as sock:
        if sock is None:
            return ""
        kind = f" {getattr(sock.family, 'name', sock.family)} {getattr(sock.type, 'name', sock.type)}"
        try:
            kind += f" peer {sock.getpeername()!r}"
        except OSError as e:
            kind += f" no peer ({e.strerror or e})"
        return kind


def _socket_inode(target: str) -> int | None:
    if target.startswith("socket:[") and target.endswith("]"):
        try:
            return int(target[len("socket:[") : -1])
        except ValueError:
            return None
    return None


def ended_connections(before: Snapshot, after: Snapshot) -> int:
    """How many of the descriptors ``after`` has that ``before`` did not are TCP
    sockets whose connection has ended (no peer, not listening): a runtime's
    connection to a process that is gone, which it closes on a schedule of its
    own (Ray's driver, to a dead actor's worker)."""
    import socket

    count = 0
    for fd, target in _new_fd_targets(before, after).items():
        if not target.startswith("socket:"):
            continue
        with _copy_of_socket(fd) as sock:
            if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
                continue
            try:
                listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            except OSError:
                continue
            if listening:
                continue
            try:
                sock.getpeername()
            except OSError:
                count += 1
    return count


def paired_sockets(before: Snapshot, after: Snapshot) -> int:
    """How many connected UNIX socket pairs among the descriptors ``after`` has
    that ``before`` did not have both of whose ends this process holds (a
    runtime's internal wake-up channel: one object, two descriptors). Peers
    from ``ss -xn``; 0 where it is not there."""
    import shutil
    import subprocess

    inodes = {i for i in map(_socket_inode, _new_fd_targets(before, after).values()) if i is not None}
    if len(inodes) < 2 or shutil.which("ss") is None:
        return 0
    try:
        out = subprocess.run(["ss", "-xn"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    pairs = set()
    for line in out.splitlines():
        fields = line.split()
        # Netid State Recv-Q Send-Q Local-Address Port Peer-Address Port
        if len(fields) >= 8 and fields[5].isdigit() and fields[7].isdigit():
            local, peer = int(fields[5]), int(fields[7])
            if local in inodes and peer in inodes and local != peer:
                pairs.add(frozenset((local, peer)))
    return len(pairs)


def baseline() -> Snapshot:
    """A snapshot to compare with after a test. Tags this process first, so that
    what it starts from now on can be told apart wherever it goes; and starts
    what Python itself keeps for the whole process (multiprocessing's resource
    tracker), so that it does not count as the test's."""
    import gc
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    tag()
    gc.collect()
    return snapshot()


def new_thread_names(before: Snapshot, after: Snapshot) -> list[str]:
    """The names of the caller's threads in ``after`` that ``before`` did not have."""
    new = after.threads - before.threads
    return [t.name for t in threading.enumerate() if t.ident in new]


def new_segments(before: Snapshot, after: Snapshot) -> set[str]:
    """Shared-memory segments in ``after`` that ``before`` did not have, less those
    another process (not this one or its children) still maps."""
    ours = {os.getpid()} | before.children | after.children
    return {name for name in after.shm - before.shm if not mapped_outside(name, ours)}


def new_named_semaphores(before: Snapshot, after: Snapshot) -> set[str]:
    """Named semaphores in ``after`` that ``before`` did not have, less those
    another process still maps: in a ``/dev/shm`` the test shares (a backend with
    a run-wide session), a live one is another test's, beside this one."""
    ours = {os.getpid()} | before.children | after.children
    return {name for name in after.semaphores - before.semaphores if not mapped_outside(name, ours)}


def diff(before: Snapshot, after: Snapshot, fd_slack: int | None = 0) -> list[str]:
    """What ``after`` holds that ``before`` did not, worded for a failure message.
    ``fd_slack=None`` leaves descriptors out (see ``wait_clean``)."""
    problems = []
    new_children = after.children - before.children
    if new_children:
        problems.append("processes left: " + "; ".join(describe(pid) for pid in sorted(new_children)))
    names = new_thread_names(before, after)
    if names:
        problems.append(f"threads left in the caller: {names}")
    new_shm = new_segments(before, after)
    if new_shm:
        problems.append(f"shared-memory segments left: {sorted(new_shm)}")
    new_listening = after.listening - before.listening
    if new_listening:
        problems.append(f"listening sockets left: {sorted(new_listening)}")
    new_semaphores = new_named_semaphores(before, after)
    if new_semaphores:
        problems.append(f"named semaphores left: {sorted(new_semaphores)}")
    new_temp = after.temp - before.temp
    if new_temp:
        problems.append(f"files left in the temporary folder: {sorted(new_temp)}")
    if fd_slack is not None and after.fds > before.fds + fd_slack:
        new_fds = new_descriptors(before, after)
        named = f" (new: {'; '.join(new_fds)})" if new_fds else ""
        problems.append(f"file descriptors: {before.fds} before, {after.fds} after{named}")
    return problems


#: How long leftovers must stay the same before ``wait_clean`` may take them
#: as lasting, where the caller knows their kinds to last.
STEADY_S = 2.0


def wait_clean(
    before: Snapshot,
    timeout: float = 5.0,
    fd_slack: int | None = 0,
    lasting: Callable[[], bool] | None = None,
) -> list[str]:
    """Leaks still present after up to ``timeout`` s (reaping takes a moment).

    ``fd_slack=None`` does not count descriptors: a runtime's first start in a
    process (Ray's driver, CUDA) keeps some for the life of the process, which
    only a comparison after a warm-up cycle can tell from a leak (C10 does that).

    ``lasting()``, asked once the leftovers have stayed the same for
    ``STEADY_S``, may answer that they are of kinds an earlier check proved to
    stay (what every start leaves): the wait ends there, instead of at
    ``timeout`` for things that never go.
    """
    start = time.monotonic()
    deadline = start + timeout
    steady_since, last = start, None
    while True:
        problems = diff(before, snapshot(), fd_slack)
        now = time.monotonic()
        if not problems or now >= deadline:
            return problems
        if problems != last:
            steady_since, last = now, problems
        elif lasting is not None and now - steady_since >= STEADY_S and lasting():
            return problems
        time.sleep(0.1)


def lasting_leaks(
    before: Snapshot,
    start_and_stop: Callable[[], object],
    timeout: float = 10.0,
    known_residue: Callable[[], bool] | None = None,
    known_leak: Callable[[], bool] | None = None,
) -> tuple[list[str], list[str]]:
    """What was left since ``before`` (descriptors aside), and what of it is the executor's own.

    What a backend's first start in a process leaves for good (a library's
    monitor thread, a runtime's connection) is told apart from a leak the way
    C10 does it: where something is left, ``start_and_stop()`` starts and shuts
    down a second executor, which must leave nothing more. Returns (what the
    first left, what the second left): the second list empty means the first's
    leftovers are the process's, not a leak. ``known_residue()``, asked before
    the second start, may answer that an earlier check proved such leftovers
    the process's (``harness.pytest_plugin.residue``): then there is no second start.
    ``known_leak()``, asked next, may answer that an earlier second start left
    such leftovers again: then they are the executor's, with no second start either.
    Leftovers either answers for, unchanged for ``STEADY_S``, end the wait for
    them to go (``wait_clean``)."""

    def known() -> bool:
        return (known_residue is not None and known_residue()) or (known_leak is not None and known_leak())

    problems = wait_clean(before, timeout=timeout, fd_slack=None, lasting=known)
    if not problems:
        return [], []
    if known_residue is not None and known_residue():
        return problems, []
    if known_leak is not None and known_leak():
        return problems, problems
    first_start = baseline()
    start_and_stop()
    return problems, wait_clean(first_start, timeout=timeout, fd_slack=None)
