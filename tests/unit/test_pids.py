"""A worker's pid as the caller sees it (harness.system.pids), and marker files
found in a worker's own files (harness.conformance._markers): a process in a
PID and mount namespace of its own, as a rank on a simulated node is, is found
by the pid it knows itself by, and a file it leaves in its private /tmp is seen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from harness.conformance._markers import names_in, seen
from harness.system.pids import pid_namespace, visible

needs_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare for namespaces"
)

# In its own PID and mount namespace, with a /tmp of its own: says its pid, namespace and writes a marker.
# The Python mounts that /tmp itself, once started: it may lie under the host's
# /tmp (a checkout and its venv there), which the fresh one hides from whatever
# starts after the mount (a simulated node cannot run such a Python at all:
# harness.system.nodes.unavailable_reason says so). What it needs is loaded by then.
_NODE = """
import os, subprocess, sys, time
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/tmp"], check=True)
os.makedirs("/tmp/markers", exist_ok=True)
open("/tmp/markers/rank-1", "w").close()
print(os.getpid(), os.stat("/proc/self/ns/pid").st_ino, flush=True)
time.sleep(60)
"""


def test_this_process_is_visible_as_itself() -> None:
    assert visible(os.getpid(), pid_namespace()) == os.getpid()
    assert visible(os.getpid(), 0) == os.getpid()


def test_a_pid_of_a_namespace_nowhere_in_sight_is_none() -> None:
    assert visible(1, 1) is None


@pytest.fixture
def node() -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    # --kill-child: the process goes with unshare, not 60 s later.
    argv = ["unshare", "--pid", "--kill-child", "--mount", "--propagation", "private", "--mount-proc"]
    argv += [sys.executable, "-c", _NODE]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        said = proc.stdout.readline().split()
        assert len(said) == 2, f"the process in namespaces of its own said {said}, exit status {proc.poll()}"
        pid, namespace = (int(x) for x in said)
        try:
            yield proc, pid, namespace
        finally:
            proc.kill()


@needs_namespaces
def test_a_process_of_another_pid_namespace_is_found_by_its_own_pid(
    node: tuple[subprocess.Popen[str], int, int],
) -> None:
    _, pid, namespace = node
    assert namespace != pid_namespace(), "the process did not get a PID namespace of its own"
    host = visible(pid, namespace)
    assert host is not None and host != pid, f"pid {pid} of namespace {namespace} not found here"
    with open(f"/proc/{host}/cmdline", "rb") as f:
        assert b"rank-1" in f.read(), "found another process than the one that reported"


@needs_namespaces
def test_a_marker_in_a_processs_private_tmp_is_seen_through_its_root(
    node: tuple[subprocess.Popen[str], int, int],
) -> None:
    _, pid, namespace = node
    host = visible(pid, namespace)
    assert host is not None
    deadline = time.monotonic() + 10
    while not seen("/tmp/markers/rank-1", [host]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen("/tmp/markers/rank-1", [host])
    assert "rank-1" in names_in("/tmp/markers", [host])
    assert not seen("/tmp/markers/rank-1-never", [host])
