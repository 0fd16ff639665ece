"""The keeper of a local Ray cluster stops everything it started, whatever
process group a member put itself in (Ray's workers each lead one)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from harness.executors.ray import cluster

# A keeper stand-in: leads its own session, starts a member that moves to a
# process group of its own and ignores SIGTERM (as a Ray worker still starting
# when its raylet died), prints the member's pid, then stops its session.
_KEEPER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    from harness.executors.ray import cluster
    member = subprocess.Popen([sys.executable, "-c",
        "import os, signal, time; os.setpgid(0, 0); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print(os.getpid(), flush=True); time.sleep(3600)"], stdout=subprocess.PIPE)
    pid = member.stdout.readline().decode().strip()
    assert os.getpgid(int(pid)) != os.getpgid(0), "the member did not leave the keeper's group"
    print(pid, flush=True)
    sys.stdin.readline()
    cluster._stop_session()
    """
)


def test_stopping_the_session_kills_a_member_in_a_process_group_of_its_own() -> None:
    member = 0
    with subprocess.Popen(
        [sys.executable, "-c", _KEEPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    ) as keeper:
        try:
            assert keeper.stdout is not None and keeper.stdin is not None
            member = int(keeper.stdout.readline())
            assert cluster.session_members(keeper.pid) == [member]
            keeper.stdin.write(b"stop\n")
            keeper.stdin.flush()
            assert keeper.wait(30) == 0
            deadline = time.monotonic() + 10
            while psutil.pid_exists(member) and psutil.Process(member).status() != psutil.STATUS_ZOMBIE:
                assert time.monotonic() < deadline, f"member {member} outlived its keeper's stop by 10 s"
                time.sleep(0.05)
        finally:
            keeper.kill()
            if member and psutil.pid_exists(member):
                os.kill(member, 9)


def test_the_session_lists_neither_its_leader_nor_the_caller() -> None:
    me = os.getpid()
    assert me not in cluster.session_members(os.getsid(0))
    assert os.getsid(0) not in cluster.session_members(os.getsid(0))


def test_a_stopped_cluster_leaves_no_semaphore_of_its_raylets(tmp_path: Path) -> None:
    """A raylet's channel semaphores are named after it; another process's stay."""
    names = ["sem.hdr4242-17", "sem.obj4242-17", "sem.hdr4343-18", "sem.mp-x", "sem.hdrx-1", "other"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    cluster._remove_semaphores({4242, 7}, str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "sem.hdr4343-18", "sem.hdrx-1", "sem.mp-x"]
