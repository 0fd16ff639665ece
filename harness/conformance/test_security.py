"""C23: nothing listens beyond loopback; shared memory is private."""

from __future__ import annotations

import os
import stat
from typing import Any

import psutil
import pytest

from harness import ExecutorConfig, leaks, probes

pytestmark = pytest.mark.timeout(300)


def _non_loopback(pid: int) -> list[tuple[str, int]]:
    try:
        return [(a, p) for a, p in leaks.listening_sockets(pid) if not leaks.is_loopback(a)]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.clause("C23")
def test_c23_nothing_listens_beyond_loopback_and_shm_is_private(backend: Any, executor_config: ExecutorConfig) -> None:
    shm_before = leaks.shm_segments()
    caller_before = set(_non_loopback(os.getpid()))
    with backend.factory(executor_config) as ex:
        ex.collective_rpc(probes.collectives)  # the process group's peers are connected by now
        pids = [int(p) for p in ex.collective_rpc(probes.pid)]
        offenders = {pid: _non_loopback(pid) for pid in pids if pid != os.getpid()}
        caller_new = sorted(set(_non_loopback(os.getpid())) - caller_before)
        new_shm = sorted(leaks.shm_segments() - shm_before)
        modes = {}
        for name in new_shm:
            try:
                modes[name] = stat.S_IMODE(os.stat(os.path.join("/dev/shm", name)).st_mode)
            except FileNotFoundError:
                pass
    assert not caller_new, f"the caller listens beyond loopback on {caller_new}"
    bad = {pid: socks for pid, socks in offenders.items() if socks}
    assert not bad, f"workers listen beyond loopback: {bad}"
    loose = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert not loose, f"shared-memory segments readable by others: {loose}"
