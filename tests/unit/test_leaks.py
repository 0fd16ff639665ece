"""harness.system.leaks finds every process a caller started, wherever it went."""

from __future__ import annotations

import mmap
import multiprocessing
import multiprocessing.util
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness.system import leaks

# Each test diffs a temporary folder of its own (tests/unit/conftest.py).
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    pytest.mark.usefixtures("own_temporary_folder"),
]

# Double-forks into a new session, writes its pid, sleeps: out of the caller's tree.
_DETACH = """
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


@pytest.fixture
def reap() -> Iterator[list[int]]:
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _fork() -> int:
    # The child only writes to a pipe or sleeps: safe with pytest's threads
    # (Python 3.12+ warns about fork in a threaded process, an error here).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _wait_for_pid(path: Path) -> int:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, "the helper did not write its pid"
        time.sleep(0.02)
    return int(path.read_text())


def test_tag_is_stable_within_a_process_and_set_in_its_environment() -> None:
    first = leaks.tag()
    assert leaks.tag() == first
    assert os.environ[leaks.TAG_ENV] == first


def test_a_forked_child_gets_a_tag_of_its_own() -> None:
    parent = leaks.tag()
    r, w = os.pipe()
    pid = _fork()
    if pid == 0:
        try:
            os.write(w, leaks.tag().encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    child = os.read(r, 100).decode()
    os.close(r)
    assert child and child != parent


def test_an_exec_ed_process_that_left_the_tree_is_found_by_its_environment(tmp_path: Path, reap: list[int]) -> None:
    tag = leaks.tag()
    subprocess.run([sys.executable, "-c", _DETACH, str(tmp_path / "pid")], check=True, timeout=30)
    pid = _wait_for_pid(tmp_path / "pid")
    reap.append(pid)
    assert pid not in {c.pid for c in psutil.Process().children(recursive=True)}
    assert pid in leaks.tagged(tag)
    assert pid in leaks.started_by(os.getpid(), tag)
    assert pid not in leaks.tagged(leaks.new_tag()), "another tag must not match"


def test_a_forked_process_that_left_the_tree_is_found_by_its_marker(reap: list[int]) -> None:
    tag = leaks.tag()
    r, w = os.pipe()
    pid = _fork()
    if pid == 0:
        try:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                time.sleep(60)
            else:
                os.write(w, str(grandchild).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    grandchild = int(os.read(r, 100))
    os.close(r)
    reap.append(grandchild)
    # No exec: its /proc environ is this process's original one, without the tag.
    with open(f"/proc/{grandchild}/environ", "rb") as f:
        assert f"{leaks.TAG_ENV}={tag}".encode() not in f.read().split(b"\0")
    assert grandchild in leaks.tagged(tag)


def test_the_snapshot_counts_processes_outside_the_tree(tmp_path: Path, reap: list[int]) -> None:
    before = leaks.baseline()
    subprocess.run([sys.executable, "-c", _DETACH, str(tmp_path / "pid")], check=True, timeout=30)
    pid = _wait_for_pid(tmp_path / "pid")
    reap.append(pid)
    problems = leaks.diff(before, leaks.snapshot(), fd_slack=None)
    assert any(f"pid {pid}" in p for p in problems), problems


def test_pythons_forkserver_is_not_a_leak_of_the_process_that_uses_it() -> None:
    before = leaks.baseline()
    ctx = multiprocessing.get_context("forkserver")
    proc = ctx.Process(target=time.sleep, args=(0,))
    proc.start()
    proc.join(30)
    proc.close()
    assert leaks.wait_clean(before, timeout=5, fd_slack=None) == []


def test_shm_mapped_by_names_the_segments_a_process_maps() -> None:
    from multiprocessing import shared_memory

    seg = shared_memory.SharedMemory(create=True, size=4096)
    try:
        assert seg.name in leaks.shm_mapped_by([os.getpid()])
    finally:
        seg.close()
        seg.unlink()


_DETACHED_MAPPER = """
import mmap, os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
fd = os.open("/dev/shm/" + sys.argv[2], os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
seg = mmap.mmap(fd, 4096)
os.close(fd)
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def test_a_segment_mapped_by_a_process_that_left_the_tree_is_ours(tmp_path: Path, reap: list[int]) -> None:
    before = leaks.baseline()
    name = f"harness_test_{os.getpid()}_{time.monotonic_ns()}"
    subprocess.run([sys.executable, "-c", _DETACHED_MAPPER, str(tmp_path / "pid"), name], check=True, timeout=30)
    pid = _wait_for_pid(tmp_path / "pid")
    reap.append(pid)
    try:
        assert name in leaks.shm_mapped_by([pid])
        problems = leaks.diff(before, leaks.snapshot(), fd_slack=None)
        assert any("shared-memory segments left" in p and name in p for p in problems), problems
    finally:
        os.kill(pid, signal.SIGKILL)
        os.unlink(f"/dev/shm/{name}")


def test_a_watched_nodes_dev_shm_is_listed_under_its_name_and_reached_through_its_root() -> None:
    """A node's segments read as ``node 1:<name>``, found where that node's
    /dev/shm is; here the "node" is this process itself (its root is ours)."""
    name = f"harness-unit-{os.getpid()}"
    path = os.path.join(leaks.SHM_DIR, name)
    with open(path, "wb"):
        pass
    try:
        leaks.watch_nodes({"node 1": os.getpid()})
        found = leaks.shm_segments()
        assert name in found and f"node 1:{name}" in found
        assert leaks.is_node_segment(f"node 1:{name}") and not leaks.is_node_segment(name)
        assert os.path.samefile(leaks.shm_path(f"node 1:{name}"), path)
        # A process on that node maps it by its own path: named with its node.
        with open(path, "r+b") as f:
            f.write(b"x")
            f.flush()
            with mmap.mmap(f.fileno(), 1):
                assert f"node 1:{name}" in leaks.shm_mapped_by([os.getpid()])
    finally:
        leaks.watch_nodes({})
        os.unlink(path)
    assert f"node 1:{name}" not in leaks.shm_segments()


def test_a_new_semaphore_another_process_maps_is_not_this_tests_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    # In a /dev/shm shared with tests beside this one (a backend with a run-wide
    # session), a live semaphore is theirs; one nobody maps any more is a leak.
    monkeypatch.setattr(leaks, "mapped_outside", lambda name, ours: name == "sem.theirs")
    before, after = leaks.Snapshot(), leaks.Snapshot(semaphores={"sem.theirs", "sem.left"})
    assert leaks.new_named_semaphores(before, after) == {"sem.left"}
    problems = leaks.diff(before, after, fd_slack=None)
    assert problems == ["named semaphores left: ['sem.left']"], problems


def test_a_descriptor_left_open_is_named_with_what_it_refers_to(tmp_path: Path) -> None:
    before = leaks.snapshot()
    kept = open(tmp_path / "kept.txt", "w")  # noqa: SIM115 - left open on purpose
    r, w = os.pipe()
    try:
        problems = leaks.diff(before, leaks.snapshot())
    finally:
        kept.close()
        os.close(r)
        os.close(w)
    [fds] = [p for p in problems if p.startswith("file descriptors")]
    assert str(tmp_path / "kept.txt") in fds, fds
    assert fds.count("pipe:[") == 2, fds


def test_both_ends_of_a_socket_pair_the_process_holds_are_told_as_one_pair() -> None:
    import socket

    before = leaks.snapshot()
    a, b = socket.socketpair()
    alone = socket.socket(socket.AF_UNIX)
    try:
        assert leaks.paired_sockets(before, leaks.snapshot()) == 1
    finally:
        for s in (a, b, alone):
            s.close()
    before = leaks.snapshot()
    unpaired = [socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)]
    try:
        assert leaks.paired_sockets(before, leaks.snapshot()) == 0
    finally:
        for s in unpaired:
            s.close()


def _reset_by_its_peer(server: Any) -> Any:
    """A client connection to ``server`` whose peer reset it (linger 0): its
    socket has no peer any more, and it leaves /proc/net/tcp."""
    import socket

    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    accepted.close()
    return client


def test_a_socket_left_open_after_its_connection_ended_is_named_as_one_without_a_peer() -> None:
    # What /proc/net lists no longer (a TCP connection reset by its peer) is
    # still named: its family, its type, and that it has no peer.
    import socket
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    before = leaks.snapshot()
    client = _reset_by_its_peer(server)
    time.sleep(0.2)
    fd = client.fileno()
    try:
        named = leaks.new_descriptors(before, leaks.snapshot())
    finally:
        client.close()
        server.close()
    [line] = [n for n in named if n.startswith(f"{fd} -> socket:[")]
    assert line.endswith("AF_INET SOCK_STREAM no peer (Transport endpoint is not connected)"), named


def test_tcp_sockets_whose_connection_ended_are_counted_and_live_or_listening_ones_are_not() -> None:
    # C10 does not count them as leaked while they do not grow (Ray's driver
    # keeps its connections to a dead actor's worker for a while).
    import socket
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    before = leaks.snapshot()
    live = socket.create_connection(server.getsockname())
    live_peer, _ = server.accept()
    ended = _reset_by_its_peer(server)
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    r, w = os.pipe()
    time.sleep(0.2)
    try:
        assert leaks.ended_connections(before, leaks.snapshot()) == 1
    finally:
        for s in (live, live_peer, ended, listening, server):
            s.close()
        os.close(r)
        os.close(w)


def _thread_until(event: Any, name: str) -> Any:
    import threading

    thread = threading.Thread(target=event.wait, name=name, daemon=True)
    thread.start()
    return thread


def test_leftovers_known_to_last_end_the_wait_once_they_stay_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setattr(leaks, "STEADY_S", 0.3)
    before = leaks.baseline()
    stop = threading.Event()
    thread = _thread_until(stop, "lasting-leftover")
    asked: list[float] = []
    try:
        start = time.monotonic()
        problems = leaks.wait_clean(before, timeout=60, fd_slack=None, lasting=lambda: asked.append(1.0) or True)
        took = time.monotonic() - start
    finally:
        stop.set()
        thread.join(5)
    assert problems and "lasting-leftover" in problems[0], problems
    assert asked, "the wait never asked whether the leftovers last"
    assert took < 60, f"the wait ran to its timeout ({took:.1f} s) for leftovers known to last"


def test_leftovers_not_known_to_last_are_waited_for_until_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setattr(leaks, "STEADY_S", 0.1)
    before = leaks.baseline()
    stop = threading.Event()
    thread = _thread_until(stop, "unknown-leftover")
    asked: list[float] = []
    try:
        start = time.monotonic()
        problems = leaks.wait_clean(before, timeout=1.0, fd_slack=None, lasting=lambda: asked.append(1.0) and False)
        took = time.monotonic() - start
    finally:
        stop.set()
        thread.join(5)
    assert problems and "unknown-leftover" in problems[0], problems
    assert asked, "the wait never asked whether the leftovers last"
    assert took >= 1.0, f"the wait ended after {took:.2f} s, before its timeout, for leftovers not known to last"


def test_a_leftover_that_goes_while_it_is_new_is_no_leak_even_of_a_kind_that_lasts() -> None:
    import threading

    before = leaks.baseline()
    stop = threading.Event()
    thread = _thread_until(stop, "short-lived")
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    try:
        # STEADY_S (2 s) outlasts the thread: the wait sees it go.
        assert leaks.wait_clean(before, timeout=30, fd_slack=None, lasting=lambda: True) == []
    finally:
        stop.set()
        timer.cancel()
        thread.join(5)
