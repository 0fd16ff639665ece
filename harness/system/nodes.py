"""Simulated nodes on one machine: network namespaces behind a private bridge.

The network layer of a simulated cluster. A private "world" namespace holds a
bridge; each node is a namespace of its own (network, and mount: a private
``/tmp`` and ``/dev/shm``, as real machines share neither) with one link to
that bridge and an address of its own. The world has no link to the host's
namespace, so nothing here can reach, or collide with, the host's network, and
nothing is ever added to the host's namespace: every link is made inside the
world, its node end created straight in the node's namespace.

::

    host's namespace (untouched)
      │  holder processes (unshare … sleep), one per namespace, dying with us
      ▼
    world ── br0 10.213.0.254/24 ─┬─ veth ── node 0: eth0 10.213.0.1/24, lo, own /tmp, /dev/shm
                                  ├─ veth ── node 1: eth0 10.213.0.2/24, …
                                  └─ …

Every namespace is anonymous and held by one process (``unshare`` exec'ing
``sleep``) that the kernel kills when the process that made it dies
(``PR_SET_PDEATHSIG``): a Ctrl-C, a SIGKILL or a crash of the owner takes the
namespaces, the bridge and the links with it, with no name left in
``/run/netns``. Processes started inside a node (``Nodes.popen``) die with
their owner the same way. ``ip`` (iproute2) does the links: one command per
step, in the namespace through ``nsenter``; pyroute2 would add a dependency
for a dozen commands run once per cluster.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.system.parent_death import signal_on_parent_death

__all__ = ["NODE_SUBNET", "Node", "Nodes", "unavailable_reason"]

#: The simulated nodes' subnet. Any would do: the world namespace has no link to
#: the host's, so an address here can never meet one of the host's networks.
NODE_SUBNET = ipaddress.ip_network("10.213.0.0/24")
#: The world's own address on the bridge (where the caller runs).
_WORLD_HOST = 254
_REAPED_S = 10.0


def unavailable_reason() -> str | None:
    """Why simulated nodes cannot be made here, or None where they can."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    missing = [tool for tool in ("ip", "unshare", "nsenter") if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (iproute2, util-linux) for network namespaces"
    return None


def _dies_with_parent() -> None:
    """In a child before exec: SIGKILL when the process that started it dies."""
    signal_on_parent_death()


def _net_ns(pid: int) -> int:
    """The inode of ``pid``'s network namespace."""
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def _in_namespace_of(pid: int) -> list[int]:
    """Every process in ``pid``'s network namespace, ``pid`` included."""
    with contextlib.suppress(OSError):
        ns = _net_ns(pid)
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if _net_ns(int(entry)) == ns:
                        found.append(int(entry))
        return found
    return []


@dataclass
class Node:
    """One simulated node: its namespaces' holder process and its address."""

    index: int
    address: str
    holder: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.holder.pid

    def pids(self) -> list[int]:
        """Every process in this node's network namespace, its holder included."""
        return _in_namespace_of(self.pid)


@dataclass
class Nodes:
    """``count`` simulated nodes behind a private bridge; ``close()`` removes them all.

    Use as a context manager. Made only where :func:`unavailable_reason` is None."""

    count: int
    world: subprocess.Popen[bytes] | None = None
    nodes: list[Node] = field(default_factory=list)
    _started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.count < 1 or self.count >= _WORLD_HOST:
            raise ValueError(f"Nodes: count must be 1..{_WORLD_HOST - 1}, got {self.count!r}")
        why = unavailable_reason()
        if why:
            raise RuntimeError(f"Nodes: simulated nodes cannot be made here: {why}")
        try:
            self.world = self._holder(private_files=False)
            self._ip(self.world, "link", "set", "lo", "up")
            self._ip(self.world, "link", "add", "br0", "type", "bridge")
            self._ip(self.world, "addr", "add", f"{self.world_address}/{NODE_SUBNET.prefixlen}", "dev", "br0")
            self._ip(self.world, "link", "set", "br0", "up")
            for i in range(self.count):
                self.nodes.append(self._node(i))
        except BaseException:
            self.close()
            raise

    @property
    def world_address(self) -> str:
        return str(NODE_SUBNET[_WORLD_HOST])

    def _holder(self, private_files: bool) -> subprocess.Popen[bytes]:
        """A process in new namespaces (network; and mount with a private /tmp and
        /dev/shm where ``private_files``) that holds them until it dies."""
        flags = ["--net"]
        mounts = ""
        if private_files:
            flags += ["--mount", "--propagation", "private"]
            mounts = "mount -t tmpfs -o mode=1777 tmpfs /tmp && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && "
        holder = subprocess.Popen(
            ["unshare", *flags, "sh", "-c", f"{mounts}echo ready && exec sleep infinity"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_dies_with_parent,  # noqa: PLW1509 - prctl only, before exec
        )
        assert holder.stdout is not None
        ready = holder.stdout.readline()
        if ready.strip() != b"ready":
            err = holder.stderr.read().decode(errors="replace") if holder.stderr else ""
            holder.kill()
            holder.wait()
            raise RuntimeError(f"Nodes: a namespace holder ({' '.join(flags)}) did not start: {err.strip()!r}")
        return holder

    def _node(self, i: int) -> Node:
        assert self.world is not None
        holder = self._holder(private_files=True)
        node = Node(i, str(NODE_SUBNET[i + 1]), holder)
        # Made in the world, the node's end straight in the node's namespace:
        # no link exists in the host's namespace, not even for a moment.
        self._ip(self.world, "link", "add", f"n{i}", "type", "veth", "peer", "name", "eth0", "netns", str(holder.pid))
        self._ip(self.world, "link", "set", f"n{i}", "master", "br0", "up")
        self._ip(holder, "link", "set", "lo", "up")
        self._ip(holder, "addr", "add", f"{node.address}/{NODE_SUBNET.prefixlen}", "dev", "eth0")
        self._ip(holder, "link", "set", "eth0", "up")
        return node

    @staticmethod
    def _ip(ns: subprocess.Popen[bytes], *args: str) -> None:
        done = subprocess.run(
            ["nsenter", "-t", str(ns.pid), "-n", "ip", *args], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            what = " ".join(args)
            raise RuntimeError(f"Nodes: 'ip {what}' in the namespace of pid {ns.pid} failed: {done.stderr.strip()}")

    def command(self, node: int | None, argv: Sequence[str]) -> list[str]:
        """``argv`` run in node ``node``'s namespaces (None: in the world's)."""
        if node is None:
            assert self.world is not None
            return ["nsenter", "-t", str(self.world.pid), "-n", *argv]
        if not 0 <= node < len(self.nodes):
            raise ValueError(f"Nodes: no node {node!r}: there are {len(self.nodes)} (0..{len(self.nodes) - 1})")
        return ["nsenter", "-t", str(self.nodes[node].pid), "-n", "-m", *argv]

    def popen(self, node: int | None, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in a node (None: the world); it dies with this process."""
        proc = subprocess.Popen(self.command(node, argv), preexec_fn=_dies_with_parent, **kwargs)  # noqa: PLW1509
        self._started.append(proc)
        return proc

    def run(self, node: int | None, argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in a node (None: the world) to its end; its output as text."""
        return subprocess.run(
            self.command(node, argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            preexec_fn=_dies_with_parent,
        )

    def kill_node(self, node: int) -> list[int]:
        """SIGKILL every process in node ``node`` at once but its holder (the node
        stays, empty, like a machine that lost its processes); the pids killed."""
        victims = [p for p in self.nodes[node].pids() if p != self.nodes[node].pid]
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return victims

    def cut(self, node: int, connected: bool = False) -> None:
        """Take node ``node``'s link down (``connected=True``: up again)."""
        assert self.world is not None
        self._ip(self.world, "link", "set", f"n{node}", "up" if connected else "down")

    def close(self) -> None:
        """SIGKILL every process in the nodes and the world (what was started
        there included), then the holders: the namespaces, their links and the
        bridge go with the last process in them. Idempotent."""
        holders = [n.holder for n in self.nodes] + ([self.world] if self.world is not None else [])
        for holder in holders:
            if holder.poll() is None:
                for pid in _in_namespace_of(holder.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        for proc in [*self._started, *holders]:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_REAPED_S)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        self.nodes.clear()
        self._started.clear()
        self.world = None

    def __enter__(self) -> Nodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
