"""C23's look at a running executor: what listens beyond loopback, which shared memory others could open.

Used by the C23 test in its own process, and by ``_netns`` in a network
namespace where the host name resolves to an address that is not loopback.
The processes looked at are every process the executor started (``leaks``:
descendants of the caller and processes carrying its tag, wherever they went),
plus the pids the workers report (for backends whose workers inherit nothing
from the caller, such as Ray actors).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from harness import ExecutorConfig
from harness.conformance import probes
from harness.conformance._workers import worker_pids
from harness.system import leaks

__all__ = ["CollectivesFailedError", "Exposure", "examine"]


class CollectivesFailedError(Exception):
    """The workers' process group did not run a collective: C23 cannot look at
    its sockets (C15 is the clause that fails)."""


@dataclass
class Exposure:
    #: pids looked at besides the caller
    examined: list[int] = field(default_factory=list)
    #: who ("the caller", or a described pid) -> (address, port) bound beyond loopback
    listening: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    #: shared-memory segment -> its mode, where others may open it
    loose_shm: dict[str, str] = field(default_factory=dict)

    #: across nodes, only a socket on every interface is a problem
    across_nodes: bool = False

    def problems(self) -> list[str]:
        where = "on every interface" if self.across_nodes else "beyond loopback"
        out = [f"{who} listens {where} on {socks}" for who, socks in self.listening.items()]
        if self.loose_shm:
            out.append(f"shared-memory segments others may open (expected mode 0600): {self.loose_shm}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "examined": self.examined,
            "listening": self.listening,
            "loose_shm": self.loose_shm,
            "across_nodes": self.across_nodes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Exposure:
        listening = {who: [(str(a), int(p)) for a, p in socks] for who, socks in data["listening"].items()}
        return cls(list(data["examined"]), listening, dict(data["loose_shm"]), bool(data.get("across_nodes")))


#: The addresses of every interface: where a socket bound to them is reached from anywhere.
WILDCARDS = ("0.0.0.0", "::", "")


def _non_loopback(pid: int, across_nodes: bool = False) -> list[tuple[str, int]]:
    """What ``pid`` listens on beyond loopback; across nodes, on every interface
    (a node's own address on the cluster's network is where its peers reach it)."""
    try:
        socks = [(a, p) for a, p in leaks.listening_sockets(pid) if not leaks.is_loopback(a)]
    except psutil.Error:  # gone meanwhile, or not ours to look at
        return []
    return sorted((a, p) for a, p in socks if not across_nodes or a in WILDCARDS)


def examine(factory: Callable[[ExecutorConfig], Any], config: ExecutorConfig, tag: str) -> Exposure:
    """Start an executor from this (tagged) process, connect its process group,
    and look at everything it started. Shuts the executor down before returning."""
    me = os.getpid()
    across = config.nodes > 1
    shm_before = leaks.shm_segments()
    caller_before = set(_non_loopback(me, across))
    found = Exposure(across_nodes=across)
    ex = factory(config)
    try:
        try:
            ex.collective_rpc(probes.collectives)  # the peers are connected, and listening, by now
        except Exception as exc:
            raise CollectivesFailedError(f"collective_rpc(collectives) raised {exc!r}") from exc
        reported = set(worker_pids(ex))
        pids = sorted((leaks.started_by(me, tag) | reported) - {me})
        found.examined = pids
        caller_new = sorted(set(_non_loopback(me, across)) - caller_before)
        if caller_new:
            found.listening["the caller"] = caller_new
        for pid in pids:
            socks = _non_loopback(pid, across)
            if socks:
                found.listening[leaks.describe(pid)] = socks
        # The executor's segments: those created meanwhile (unless some process
        # outside it maps them: another run's), and any its processes map. On
        # the nodes only the latter: tests running at once share a node's /dev/shm.
        ours = {me, *pids}
        created = leaks.shm_segments() - shm_before
        segments = {n for n in created if not leaks.is_node_segment(n) and not leaks.mapped_outside(n, ours)}
        segments |= leaks.shm_mapped_by(pids)
        for name in sorted(segments):
            try:
                mode = stat.S_IMODE(os.stat(leaks.shm_path(name)).st_mode)
            except FileNotFoundError:
                continue
            if mode & 0o077:
                found.loose_shm[name] = oct(mode)
    finally:
        ex.shutdown()
    return found
