"""A real multi-node Ray cluster on one machine, its nodes simulated.

Each node is a set of namespaces of :class:`harness.system.nodes.Nodes` (its
own address, ``/tmp``, ``/dev/shm`` and processes); the caller runs in the
world, the machine that holds the bridge and the cluster's head with no CPUs
of its own, as a driver does on a head node that runs no tasks::

    world 10.213.0.254 ── caller (driver) ── ray start --head, 0 CPUs: GCS, raylet
      │ bridge
      ├─ node 0  10.213.0.1: ray start --address 10.213.0.254:6379: raylet, agents, workers
      ├─ node 1  10.213.0.2: the same
      └─ …

The head is the driver's machine for two reasons: a node may then die (every
node can be killed, as every rank's machine can) without the cluster's GCS;
and a driver that sees every node's processes (the suite's test processes, in
the host's PID namespace) takes the head's raylet for its own among the
raylets it finds, as Ray picks the head where several run on one host.

Ray's token authentication stays on, with a token of the cluster's own,
written into each machine's private files (nodes share no file system). Ray's
temporary folders are in each machine's own ``/tmp`` (the world's: its own
``/dev/shm``), so they go with the namespaces: stopping the cluster, or its
owner dying, leaves nothing on the host. Nothing here imports Ray.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from subprocess import DEVNULL, CompletedProcess, Popen
from typing import Any

from harness.executors.ray.cluster import ray_start_bound, start_too_slow_for_ray
from harness.system.nodes import Nodes, kill_machine

__all__ = ["SimulatedCluster"]

#: Starts of one machine's Ray, the first included, while Ray's own 30 s wait
#: for its raylet runs out on a loaded machine.
_START_TRIES = 4
_GCS_PORT = 6379
_READY = "Ray runtime started"
# The world keeps the host's /tmp (the caller's files): its Ray folder is on its own /dev/shm.
_WORLD_RAY_DIR = "/dev/shm/hray"
_NODE_RAY_DIR = "/tmp/hray"
_TOKEN_FILE = "auth_token"
_LOG_FILE = "ray-start.log"
_OBJECT_STORE_BYTES = 200 * 1024 * 1024
#: How often, and how patiently, the head checks that a node is alive.
HEALTH_CHECK_PERIOD_MS = 1000
HEALTH_CHECK_TIMEOUT_MS = 2000
# The caller's temporary folder is a path on the host: nodes do not have it.
_HOST_ONLY_ENV = ("TMPDIR", "RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_TMPDIR")


@dataclass
class SimulatedCluster:
    """``nodes`` simulated nodes running a Ray cluster; ``stop()`` removes it all.

    Use :meth:`start` (or as a context manager). The caller's side is the world:
    start drivers there with :meth:`popen` or :meth:`run`, with :meth:`driver_env`."""

    nodes: Nodes
    cpus_per_node: int
    _token: str = field(default_factory=lambda: secrets.token_hex(32), repr=False)
    _starts: dict[int | None, Popen[bytes]] = field(default_factory=dict)
    #: Each machine's ``ray start`` arguments (head or worker) and how often it was started.
    _roles: dict[int | None, list[str]] = field(default_factory=dict)
    _tries: dict[int | None, int] = field(default_factory=dict)

    @classmethod
    def start(cls, nodes: int, cpus_per_node: int = 2, timeout_s: float | None = None) -> SimulatedCluster:
        """Make ``nodes`` nodes and start Ray: the head, with no CPUs, in the world,
        and a raylet with ``cpus_per_node`` logical CPUs on each node; within
        ``timeout_s`` (default 120 s, stretched on a loaded machine as every
        start-up bound of the suite is)."""
        if cpus_per_node < 1:
            raise ValueError(f"SimulatedCluster: cpus_per_node must be >= 1, got {cpus_per_node!r}")
        cluster = cls(Nodes(nodes), cpus_per_node)
        try:
            deadline = time.monotonic() + (timeout_s if timeout_s is not None else ray_start_bound())
            cluster._ray_start(None, ["--head", "--include-dashboard=false", f"--port={_GCS_PORT}"])
            cluster._ready([None], deadline)
            for node in range(nodes):
                cluster._ray_start(node, [f"--address={cluster.address}"])
            cluster._ready(list(range(nodes)), deadline)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @property
    def address(self) -> str:
        """The GCS address drivers and raylets connect to (the head's, in the world)."""
        return f"{self.nodes.world_address}:{_GCS_PORT}"

    def _ray_dir(self, node: int | None) -> str:
        return _WORLD_RAY_DIR if node is None else _NODE_RAY_DIR

    def _host_path(self, node: int | None, path: str) -> str:
        """``path`` in a node's (None: the world's) files, as the host reaches it."""
        init = self.nodes.world_pid if node is None else self.nodes.nodes[node].pid
        return f"/proc/{init}/root{path}"

    def _node_env(self, node: int | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _HOST_ONLY_ENV}
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=f"{self._ray_dir(node)}/{_TOKEN_FILE}",
            RAY_USAGE_STATS_ENABLED="0",
            RAY_worker_niceness="0",  # as cluster.WORKER_NICENESS
            # The cluster ends with its namespaces: no 30 s drain on SIGTERM.
            RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0",
            # The head's GCS calls a node dead after 5 missed health checks; with
            # Ray's defaults (every 3 s, 10 s each) a node cut off is noticed after
            # 50 s or more, here after 15 s at most: C8's 30 s for a lost node
            # assumes a cluster that notices one (docs/nodes.md, "Health checks").
            RAY_health_check_period_ms=str(HEALTH_CHECK_PERIOD_MS),
            RAY_health_check_timeout_ms=str(HEALTH_CHECK_TIMEOUT_MS),
            RAY_health_check_failure_threshold="5",
        )
        return env

    def _ray_start(self, node: int | None, role: list[str]) -> None:
        self._roles[node] = role
        self._tries[node] = self._tries.get(node, 0) + 1
        folder = self._host_path(node, self._ray_dir(node))
        os.makedirs(folder, mode=0o700, exist_ok=True)  # there already where Ray starts again (heal)
        fd = os.open(os.path.join(folder, _TOKEN_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(self._token)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, _LOG_FILE))  # an earlier start's "started" is not this one's
        address = self.nodes.world_address if node is None else self.nodes.nodes[node].address
        argv = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--block",
            *role,
            f"--node-ip-address={address}",
            f"--num-cpus={0 if node is None else self.cpus_per_node}",
            "--num-gpus=0",
            f"--object-store-memory={_OBJECT_STORE_BYTES}",
            "--disable-usage-stats",
            f"--temp-dir={self._ray_dir(node)}",
        ]
        # The log is in the node's own files; read from here through /proc.
        shell = ["sh", "-c", f'exec "$@" > {self._ray_dir(node)}/{_LOG_FILE} 2>&1', "ray-start", *argv]
        self._starts[node] = self.nodes.popen(
            node, shell, env=self._node_env(node), stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL
        )

    def _ready(self, nodes: Sequence[int | None], deadline: float) -> None:
        waiting = list(nodes)
        while waiting:
            for node in list(waiting):
                text = ""
                log = self._host_path(node, f"{self._ray_dir(node)}/{_LOG_FILE}")
                with contextlib.suppress(OSError), open(log, errors="replace") as f:
                    text = f.read()
                where = "the world" if node is None else f"node {node}"
                if _READY in text:
                    waiting.remove(node)
                elif self._start_again(node, text, deadline):
                    continue
                elif self._start_of(node).poll() is not None or time.monotonic() > deadline:
                    tail = " | ".join(text.strip().splitlines()[-5:])
                    state = "exited" if self._start_of(node).poll() is not None else "did not start in time"
                    raise RuntimeError(f"SimulatedCluster: ray start in {where} {state}: {tail or 'no output'}")
            time.sleep(0.2)

    def _start_again(self, node: int | None, log_text: str, deadline: float) -> bool:
        """Start a machine's Ray again where its start failed only for Ray's own
        fixed 30 s wait for its raylet (CI: the head's start "timed out during
        startup" as four jobs started at once), with time and tries left; what
        the failed start left on that machine is killed first. Whether it did."""
        if self._start_of(node).poll() is None or not start_too_slow_for_ray(log_text):
            return False
        if self._tries.get(node, 0) >= _START_TRIES or time.monotonic() > deadline:
            return False
        with contextlib.suppress(Exception):
            self._start_of(node).wait(timeout=10)
        kill_machine(self.nodes.world_pid if node is None else self.nodes.nodes[node].init)
        self._ray_start(node, self._roles[node])
        return True

    def _start_of(self, node: int | None) -> Popen[bytes]:
        return self._starts[node]

    def heal(self, timeout_s: float | None = None) -> list[str]:
        """Bring back every node a fault took (killed, or cut off), so that the
        next driver finds the cluster whole: its link up, what survived of its
        processes killed (Ray has marked the node dead), Ray started on it again.
        What was healed, in words (empty: nothing was wrong)."""
        healed: dict[int, str] = {}
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else ray_start_bound())
        for node in range(len(self.nodes.nodes)):
            cut = not self.nodes.connected(node)
            stopped = self._start_of(node).poll() is not None
            if not (cut or stopped):
                continue
            if cut:
                self.nodes.cut(node, connected=True)
            self.nodes.kill_node(node)
            with contextlib.suppress(Exception):
                self._start_of(node).wait(timeout=10)
            self._ray_start(node, [f"--address={self.address}"])
            healed[node] = f"node {node} ({'cut off' if cut else 'its Ray stopped'})"
        self._ready(list(healed), deadline)
        return list(healed.values())

    def driver_settings(self) -> dict[str, str]:
        """Ray's settings a driver in the world needs: the cluster's address, and
        its token (in the world's files). ``RAY_AUTH_TOKEN`` is emptied: Ray prefers
        it to the token file (and treats an empty one as unset)."""
        env = {k: v for k, v in self._node_env(None).items() if k.startswith("RAY_")}
        env.update(RAY_ADDRESS=self.address, RAY_AUTH_TOKEN="")
        return env

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver in the world: this process's, with :meth:`driver_settings`."""
        env = self._node_env(None)
        env.update(self.driver_settings())
        if "TMPDIR" in os.environ:
            env["TMPDIR"] = os.environ["TMPDIR"]  # the world has the host's /tmp
        return env

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run as a driver of this cluster, in the world (env: :meth:`driver_env`)."""
        return self.nodes.command(None, argv)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> Popen[Any]:
        """Start ``argv`` in the world with the driver's environment (plus ``env``)."""
        kwargs["env"] = {**self.driver_env(), **kwargs.get("env", {})}
        return self.nodes.popen(None, argv, **kwargs)

    def run(self, argv: Sequence[str], timeout: float = 120.0, **kwargs: Any) -> CompletedProcess[str]:
        """Run ``argv`` in the world with the driver's environment, to its end."""
        kwargs["env"] = {**self.driver_env(), **kwargs.get("env", {})}
        return self.nodes.run(None, argv, timeout=timeout, **kwargs)

    def kill_node(self, node: int) -> list[int]:
        """SIGKILL every process of node ``node`` at once (Ray's included)."""
        return self.nodes.kill_node(node)

    def cut(self, node: int, connected: bool = False) -> None:
        """Take node ``node``'s link down (``connected=True``: up again)."""
        self.nodes.cut(node, connected)

    def stop(self) -> None:
        """End every process of the cluster and remove its nodes. Idempotent."""
        self.nodes.close()
        self._starts.clear()

    def __enter__(self) -> SimulatedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
