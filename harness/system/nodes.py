"""Simulated nodes on one machine: namespaces behind a private bridge.

The machines of a simulated cluster. A private "world" holds a bridge; each
node is a set of namespaces of its own (network; mount, with a private
``/tmp`` and ``/dev/shm``, as real machines share neither; PID; and host name,
``harness-node-<i>``) with one
link to that bridge and an address of its own. The world has no link to the
host's namespace, so nothing here can reach, or collide with, the host's
network, and nothing is ever added to the host's namespace: every link is made
inside the world, its node end created straight in the node's namespace.

::

    host's namespaces (untouched)
      │  unshare ─► init (PID 1) of the world, of each node: die with their owner
      ▼
    world: br0 10.213.0.254/24, own /dev/shm, /proc; the host's /tmp
      ├─ veth ── node 0: eth0 10.213.0.1/24, lo, own /tmp, /dev/shm, PIDs
      ├─ veth ── node 1: eth0 10.213.0.2/24, …
      └─ …

The world and every node are PID namespaces of their own, side by side as
machines are (a process sees its machine's processes, no others': Ray finds
its node's raylet by listing them), each with an init (``_INIT``: it reaps the
orphans a node's daemons leave). The kernel kills every process of a PID
namespace when its init dies, and each init dies with the process that made
the nodes (``PR_SET_PDEATHSIG``, through ``unshare --kill-child``): a Ctrl-C, a SIGKILL or a crash of the owner
takes every node, every process started in one (daemons that left their
parent included: Ray's raylets do), the namespaces, the bridge and the links
with it, with no name left in ``/run/netns``. ``ip`` (iproute2) makes the
links, and util-linux's ``unshare``, ``nsenter`` and ``setpriv`` the
namespaces: one command per step; pyroute2 would add a dependency for a dozen
commands run once per cluster, and does not make PID namespaces.

Processes are started in a node, or in the world (the caller's machine), with
:meth:`Nodes.popen` and :meth:`Nodes.run`; they see their namespace's own
``/proc`` and PIDs. The pids this module hands out are the host's.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from subprocess import Popen
from typing import Any

from harness.system.parent_death import signal_on_parent_death

__all__ = [
    "NODE_HOSTNAME",
    "NODE_PRIVATE",
    "NODE_SUBNET",
    "WORLD_HOSTNAME",
    "Node",
    "Nodes",
    "cut_machine",
    "hidden_from_nodes",
    "kill_machine",
    "machine_processes",
    "unavailable_reason",
]

#: The simulated nodes' subnet. Any would do: the world namespace has no link to
#: the host's, so an address here can never meet one of the host's networks.
NODE_SUBNET = ipaddress.ip_network("10.213.0.0/24")
#: Node i's host name is this and i (real machines have names of their own).
NODE_HOSTNAME = "harness-node-"
#: The world's host name.
WORLD_HOSTNAME = "harness-world"
#: What each node has of its own (a tmpfs each), as a separate machine does: the
#: host's files there are out of a node's sight.
NODE_PRIVATE = ("/tmp", "/dev/shm")
#: The world's own address on the bridge (where the caller runs).
_WORLD_HOST = 254
_REAPED_S = 10.0
_TOOLS = ("ip", "unshare", "nsenter", "setpriv")
# PID 1 of a namespace: reaps whatever is reparented to it, so a node whose
# daemons died holds no zombies (which a leak check would count as processes).
_INIT = """\
import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
print("ready", flush=True)
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    signal.sigtimedwait({signal.SIGCHLD}, 5)
"""


def unavailable_reason() -> str | None:
    """Why simulated nodes cannot be made here, or None where they can."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (iproute2, util-linux) for network namespaces"
    hidden = hidden_from_nodes()
    if hidden:
        return (
            f"a simulated node has its own {' and '.join(NODE_PRIVATE)}, as a separate machine does, and cannot see "
            + "; ".join(hidden)
            + f": run from a checkout and virtual environment outside {' and '.join(NODE_PRIVATE)}"
        )
    return None


def hidden_from_nodes() -> list[str]:
    """What a node's processes need of the host's files but cannot see, each named
    with where it came from: this Python (a node's init and Ray's workers run it)
    and the folder harness is imported from (Ray's workers import the executor's
    actors from it). A checkout under ``/tmp`` is the usual case (before, a node
    failed to start with "exec: ...python: not found"). PYTHONPATH's entries are
    not judged: a driver runs in the world, which has the host's ``/tmp``, and a
    module only it imports (a test's generated backend) need not be on a node."""
    needed = [("this Python (sys.executable)", sys.executable)]
    needed.append(("the folder harness is imported from", os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    return [f"{what} {path}" for what, path in needed if _in_node_private(path)]


def _in_node_private(path: str) -> bool:
    """Whether ``path`` (as given, or with its links resolved) lies in a folder each node has of its own."""
    forms = {os.path.abspath(path), os.path.realpath(path)}
    return any(p == d or p.startswith(d + "/") for p in forms for d in NODE_PRIVATE)


def _dies_with_parent() -> None:
    """In a child before exec: SIGKILL when the process that started it dies."""
    signal_on_parent_death()


def _ns(pid: int, kind: str) -> int:
    """The inode of ``pid``'s namespace of ``kind`` (net, pid, ...)."""
    return os.stat(f"/proc/{pid}/ns/{kind}").st_ino


def _members(pid: int, kind: str) -> list[int]:
    """Every process in ``pid``'s namespace of ``kind``, ``pid`` included."""
    with contextlib.suppress(OSError):
        ns = _ns(pid, kind)
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if _ns(int(entry), kind) == ns:
                        found.append(int(entry))
        return found
    return []


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
                out += [int(c) for c in f.read().split()]
    return out


def _init_of_namespace(pid: int) -> bool:
    """Whether ``pid`` is PID 1 of its own PID namespace (a machine's init)."""
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return int(line.split()[-1]) == 1
    return False


def machine_processes(pid: int) -> list[int]:
    """Every process of the machine ``pid`` runs on, a simulated node (its PID
    namespace), but its init; refuses the caller's own machine."""
    if _ns(pid, "pid") == _ns(os.getpid(), "pid"):
        raise ValueError(f"process {pid} runs on the caller's own machine (its PID namespace), not on a node")
    return [p for p in _members(pid, "pid") if not _init_of_namespace(p)]


def kill_machine(pid: int) -> list[int]:
    """SIGKILL every process of the simulated node ``pid`` runs on, at once, but
    its init (the machine stays, empty, like one that lost its processes); the pids killed."""
    victims = machine_processes(pid)
    for victim in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    return victims


def _links(pid: int) -> list[str]:
    done = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show"], capture_output=True, text=True, check=False
    )
    return [line.split(":")[1].strip().split("@")[0] for line in done.stdout.splitlines() if ":" in line]


def cut_machine(pid: int, connected: bool = False) -> list[str]:
    """Take every link but loopback of the machine ``pid`` runs on (its network
    namespace) down, as a pulled cable does (``connected=True``: up again); the links."""
    if _ns(pid, "net") == _ns(os.getpid(), "net"):
        raise ValueError(f"process {pid} shares the caller's network: cutting it would cut the caller")
    links = [link for link in _links(pid) if link != "lo"]
    for link in links:
        Nodes._ip(pid, "link", "set", link, "up" if connected else "down")
    return links


@dataclass
class Node:
    """One simulated node: the process that made it, its init (host pid) and its address."""

    index: int
    address: str
    holder: subprocess.Popen[bytes]
    init: int

    @property
    def pid(self) -> int:
        """The host pid of the node's init: ``nsenter -t`` it to enter the node."""
        return self.init

    def pids(self) -> list[int]:
        """Every process of this node (host pids), its init included."""
        return _members(self.init, "pid")


@dataclass
class Nodes:
    """``count`` simulated nodes behind a private bridge; ``close()`` removes them all.

    Use as a context manager. Made only where :func:`unavailable_reason` is None."""

    count: int
    world: subprocess.Popen[bytes] | None = None
    nodes: list[Node] = field(default_factory=list)
    _world_init: int = 0
    _started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.count < 1 or self.count >= _WORLD_HOST:
            raise ValueError(f"Nodes: count must be 1..{_WORLD_HOST - 1}, got {self.count!r}")
        why = unavailable_reason()
        if why:
            raise RuntimeError(f"Nodes: simulated nodes cannot be made here: {why}")
        try:
            # The world keeps the host's /tmp (the caller's files) but not its /dev/shm.
            self.world, self._world_init = self._namespaces(WORLD_HOSTNAME, "/dev/shm")
            self._ip(self._world_init, "link", "set", "lo", "up")
            self._ip(self._world_init, "link", "add", "br0", "type", "bridge")
            self._ip(self._world_init, "addr", "add", f"{self.world_address}/{NODE_SUBNET.prefixlen}", "dev", "br0")
            self._ip(self._world_init, "link", "set", "br0", "up")
            for i in range(self.count):
                self.nodes.append(self._node(i))
        except BaseException:
            self.close()
            raise

    @property
    def world_address(self) -> str:
        return str(NODE_SUBNET[_WORLD_HOST])

    @property
    def world_pid(self) -> int:
        """The host pid of the world's init."""
        return self._world_init

    def _namespaces(self, hostname: str, *private: str) -> tuple[subprocess.Popen[bytes], int]:
        """New network, mount, PID and host-name namespaces, named ``hostname``,
        a tmpfs on each of ``private``; the process that made them and their
        init's host pid. Both die with this process."""
        mounts = f"hostname {hostname} && "
        mounts += "".join(f"mount -t tmpfs -o mode=1777 tmpfs {path} && " for path in private)
        argv = [
            "unshare",
            "--net",
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--kill-child=SIGKILL",
            "--mount-proc",
            "sh",
            "-c",
            f'{mounts}exec "$1" -c "$0"',
            _INIT,
            sys.executable,
        ]
        maker = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_dies_with_parent,  # noqa: PLW1509 - prctl only, before exec
        )
        assert maker.stdout is not None
        ready = maker.stdout.readline()
        if ready.strip() != b"ready":
            err = maker.stderr.read().decode(errors="replace") if maker.stderr else ""
            maker.kill()
            maker.wait()
            raise RuntimeError(f"Nodes: namespaces ({' '.join(argv[:-4])}) were not made: {err.strip()!r}")
        # The init printed "ready": it is the newest descendant of the maker.
        chain, pid = [], maker.pid
        while kids := _children(pid):
            pid = kids[-1]
            chain.append(pid)
        return maker, chain[-1]

    def _node(self, i: int) -> Node:
        maker, init = self._namespaces(f"{NODE_HOSTNAME}{i}", "/tmp", "/dev/shm")
        node = Node(i, str(NODE_SUBNET[i + 1]), maker, init)
        # Made in the world, the node's end straight in the node's namespace:
        # no link exists in the host's namespace, not even for a moment.
        self._ip(self._world_init, "link", "add", f"n{i}", "type", "veth", "peer", "name", "eth0", "netns", str(init))
        self._ip(self._world_init, "link", "set", f"n{i}", "master", "br0", "up")
        self._ip(init, "link", "set", "lo", "up")
        self._ip(init, "addr", "add", f"{node.address}/{NODE_SUBNET.prefixlen}", "dev", "eth0")
        self._ip(init, "link", "set", "eth0", "up")
        return node

    @staticmethod
    def _ip(pid: int, *args: str) -> None:
        done = subprocess.run(
            ["nsenter", "-t", str(pid), "-n", "ip", *args], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            what = " ".join(args)
            raise RuntimeError(f"Nodes: 'ip {what}' in the namespace of pid {pid} failed: {done.stderr.strip()}")

    def command(self, node: int | None, argv: Sequence[str], cwd: str | None = None) -> list[str]:
        """``argv`` run in node ``node``'s namespaces (None: in the world's), in
        ``cwd`` (default: this process's) as that machine sees it, or in ``/``
        where it has no such folder (a node has no host ``/tmp``); it dies when
        the command's first process (``nsenter``) does."""
        if node is None:
            init = self._world_init
        elif 0 <= node < len(self.nodes):
            init = self.nodes[node].init
        else:
            raise ValueError(f"Nodes: no node {node!r}: there are {len(self.nodes)} (0..{len(self.nodes) - 1})")
        folder = os.path.abspath(cwd or os.getcwd())
        if not os.path.isdir(f"/proc/{init}/root{folder}"):
            folder = "/"
        # nsenter forks to enter a PID namespace; setpriv ties that child to it.
        return [
            "nsenter",
            "-t",
            str(init),
            "-n",
            "-m",
            "-p",
            "-u",
            f"--wdns={folder}",
            "--",
            "setpriv",
            "--pdeathsig",
            "KILL",
            "--",
            *argv,
        ]

    def popen(self, node: int | None, argv: Sequence[str], cwd: str | None = None, **kwargs: Any) -> Popen[Any]:
        """Start ``argv`` in a node (None: the world); it dies with this process,
        and with the returned process (``kill()`` it to stop ``argv``)."""
        proc = Popen(self.command(node, argv, cwd), preexec_fn=_dies_with_parent, **kwargs)  # noqa: PLW1509
        self._started.append(proc)
        return proc

    def run(
        self, node: int | None, argv: Sequence[str], timeout: float = 30.0, cwd: str | None = None, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in a node (None: the world) to its end; its output as text."""
        return subprocess.run(
            self.command(node, argv, cwd),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            preexec_fn=_dies_with_parent,
            **kwargs,
        )

    def kill_node(self, node: int) -> list[int]:
        """SIGKILL every process of node ``node`` at once but its init (the node
        stays, empty, like a machine that lost its processes); the pids killed."""
        return kill_machine(self.nodes[node].init)

    def cut(self, node: int, connected: bool = False) -> None:
        """Take node ``node``'s link down, at both ends (``connected=True``: up again)."""
        state = "up" if connected else "down"
        self._ip(self._world_init, "link", "set", f"n{node}", state)
        self._ip(self.nodes[node].init, "link", "set", "eth0", state)

    def connected(self, node: int) -> bool:
        """Whether node ``node``'s link is up at both ends."""
        ends = [(self._world_init, f"n{node}"), (self.nodes[node].init, "eth0")]
        for pid, link in ends:
            done = subprocess.run(
                ["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show", "dev", link],
                capture_output=True,
                text=True,
                check=False,
            )
            flags = done.stdout.split("<", 1)[-1].split(">", 1)[0].split(",")
            if "UP" not in flags:
                return False
        return True

    def close(self) -> None:
        """SIGKILL the inits of the nodes and the world: the kernel takes every
        process of each with it, and the namespaces, links and bridge go with the
        last of them. Returns once they are gone (10 s at most). Idempotent."""
        inits = [n.init for n in self.nodes] + ([self._world_init] if self._world_init else [])
        for init in inits:
            with contextlib.suppress(ProcessLookupError):
                os.kill(init, signal.SIGKILL)
        makers = [n.holder for n in self.nodes] + ([self.world] if self.world is not None else [])
        for proc in [*self._started, *makers]:
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
        self._world_init = 0

    def __enter__(self) -> Nodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
