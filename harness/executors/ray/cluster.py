"""A local single-node Ray cluster whose life is tied to one process.

``ray.init()`` starts a local cluster as children of the caller, and when the
caller is SIGKILLed some of them (Ray's dashboard and runtime-env agents) live
on. So a cluster is started here under a keeper instead::

    caller ── death pipe (write end) ──► keeper (session leader, own process group)
                                           └─ ray start --head --block ─► gcs, raylet, agents, workers

The keeper reports the cluster's address, then blocks on the death pipe. End of
file, the caller having closed it (``stop()``) or died (any way, even SIGKILL),
or a SIGTERM to the keeper itself, makes it stop its whole session (Ray's
workers each lead a process group of their own): SIGTERM, a short grace, then SIGKILL,
and it removes the cluster's temporary folder and its raylet's semaphores. Nothing here imports Ray.

The cluster keeps Ray's token authentication on, with a token of its own: the
keeper generates it into the cluster's private temporary folder (mode 0600,
removed with the cluster) and hands its path to ``ray start``; drivers get it
through :meth:`LocalCluster.driver_env`. ``ray start`` creates no token, and the
user's ``~/.ray/`` is neither read nor written (a fresh machine has none).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from harness.system import leaks
from harness.system.load import start_up_scale
from harness.system.processes import is_zombie

__all__ = ["LocalCluster", "ray_start_bound", "start_too_slow_for_ray"]

_START_S = 120.0
_TOKEN_FILE = "auth_token"
# Ray's settings for token authentication (read by ray start, drivers and workers).
_AUTH_MODE = "RAY_AUTH_MODE"
_TOKEN = "RAY_AUTH_TOKEN"
_TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"
_GRACE_S = 1.0
_STOP_S = 15.0


@dataclass
class LocalCluster:
    """A running cluster and its keeper; ``stop()`` ends both."""

    address: str
    keeper: subprocess.Popen[bytes]
    death_w: int
    #: Ray's temporary folder for the cluster (``ray.init(_temp_dir=...)`` finds it there).
    temp_dir: str = ""

    @property
    def token_path(self) -> str:
        """The file holding the cluster's authentication token (gone once it stops)."""
        return os.path.join(self.temp_dir, _TOKEN_FILE)

    def driver_env(self) -> dict[str, str]:
        """The environment a driver needs to connect to this cluster: its address
        and its token. ``RAY_AUTH_TOKEN`` is emptied because Ray prefers it to the
        token file (and treats an empty one as unset)."""
        return {
            "RAY_ADDRESS": self.address,
            _AUTH_MODE: "token",
            _TOKEN_PATH: self.token_path,
            _TOKEN: "",
        }

    @classmethod
    def start(
        cls,
        num_cpus: int,
        num_gpus: int | None = None,
        timeout_s: float | None = None,
        resources: dict[str, float] | None = None,
    ) -> LocalCluster:
        """Start a cluster with ``num_cpus`` logical CPUs, its address on loopback
        (Ray itself gives the node the machine's own address, not loopback's).
        ``timeout_s``: by default the keeper's own bound (:func:`ray_start_bound`, read
        once here and handed to it) and a margin. ``resources``: custom resources
        of the node (``ray start --resources``)."""
        start_s = ray_start_bound()
        if timeout_s is None:
            timeout_s = start_s + 30
        death_r, death_w = os.pipe()
        gpus = "" if num_gpus is None else str(num_gpus)
        extra = json.dumps(resources) if resources else ""
        cmd = [sys.executable, "-m", __name__, str(death_r), str(num_cpus), gpus, str(start_s), extra]
        env = dict(os.environ)
        # Its own token (the keeper makes it), whatever the caller's environment names.
        env[_AUTH_MODE] = "token"
        env.pop(_TOKEN, None)
        env.pop(_TOKEN_PATH, None)
        env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        # Stopping is this module's business: no 30 s drain on SIGTERM.
        env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
        env.setdefault(WORKER_NICENESS, "0")
        try:
            keeper = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, pass_fds=(death_r,), start_new_session=True)
        finally:
            os.close(death_r)
        cluster = cls("", keeper, death_w)
        try:
            cluster.address, cluster.temp_dir = cluster._read_address(timeout_s)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _read_address(self, timeout_s: float) -> tuple[str, str]:
        assert self.keeper.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.keeper.stdout, selectors.EVENT_READ)
            if not sel.select(timeout_s):
                raise RuntimeError(f"ray: the local cluster did not start within {timeout_s:g} s")
        line = self.keeper.stdout.readline().decode(errors="replace").strip()
        kind, _, rest = line.partition(" ")
        if kind != "ready":
            raise RuntimeError(f"ray: the local cluster did not start: {rest or 'its keeper exited'}")
        address, _, temp_dir = rest.partition(" ")
        return address, temp_dir

    def stop(self) -> None:
        """Stop the cluster (idempotent); returns once its keeper has exited."""
        if self.death_w >= 0:
            os.close(self.death_w)
            self.death_w = -1
        try:
            self.keeper.wait(_STOP_S)
        except subprocess.TimeoutExpired:
            # The keeper leads a session of its own: all it started is in it.
            with contextlib.suppress(ProcessLookupError):
                self.keeper.kill()
            _signal_session(self.keeper.pid, signal.SIGKILL)
            self.keeper.wait(5)
        if self.keeper.stdout is not None:
            self.keeper.stdout.close()


# ---- the keeper process ----------------------------------------------------------


# Below this, Ray's worker ports (10002-19999 by default) and well-known services.
_LOWEST_PORT = 20000
_START_TRIES = 4
# What ray start's log says when its GCS port was taken between choosing and binding it.
_PORT_TAKEN = ("Address already in use", "Failed to start the grpc server")
# What it says when its raylet did not register with the GCS within Ray's fixed
# 30 s (ray/_private/node.py): a loaded machine's doing (CI, three heavy jobs
# starting at once), which a second start may not meet.
_SLOW_START = ("The current node timed out during startup",)


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low, high = (int(v) for v in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _gcs_port() -> int:
    """A port free on loopback now, outside the kernel's ephemeral range: a port
    that ``bind(0)`` hands out is one the kernel also hands to every outgoing
    connection and to the next ``bind(0)``, so between choosing it and Ray's
    GCS binding it, someone else could take it (CI: "Failed to start the grpc
    server. The specified port is 35923")."""
    low, _ = _ephemeral_range()
    high = low - 1 if low - 1 > _LOWEST_PORT else 32767
    for _ in range(200):
        port = secrets.choice(range(_LOWEST_PORT, high + 1))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # every one tried was taken: let the kernel choose
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen


def _candidate_ports() -> list[int]:
    """The GCS ports to try, one per start (a test replaces it)."""
    return [_gcs_port() for _ in range(_START_TRIES)]


def _port_taken(log_text: str) -> bool:
    return any(words in log_text for words in _PORT_TAKEN)


def _worth_another_try(log_text: str) -> bool:
    """A failed ``ray start`` that another may get past: its port was taken, or
    the machine was too busy for Ray's own start-up wait."""
    return _port_taken(log_text) or start_too_slow_for_ray(log_text)


def start_too_slow_for_ray(log_text: str) -> bool:
    """Whether a ``ray start`` failed only because its raylet did not register
    within Ray's own fixed 30 s (``ray/_private/node.py``; no setting changes it):
    a loaded machine's, which a second start may get past."""
    return any(words in log_text for words in _SLOW_START)


#: The raylet starts worker processes at this niceness (Ray's default: 15). A
#: rank at 15 that shares a core with its caller at 0 runs only when the caller
#: sleeps: the ranks of the clusters started here run at the caller's priority.
WORKER_NICENESS = "RAY_worker_niceness"


def ray_start_bound() -> float:
    """How long the keeper (and a simulated cluster) tries to start a cluster:
    120 s, stretched on a loaded machine as every start-up bound of the suite is."""
    return _START_S * start_up_scale()


def _kill_others() -> None:
    """SIGKILL the rest of this session (the keeper stays): what a failed start
    left, or what outlived the grace of a stop. Listed again until none is left:
    a raylet still running may have forked a worker since the last listing."""
    sid, deadline = os.getsid(0), time.monotonic() + _STOP_S
    while _signal_session(sid, signal.SIGKILL) and time.monotonic() < deadline:
        time.sleep(0.01)


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` other than its leader and this process.

    The session, not the process group: Ray gives each worker a process group of
    its own, and a worker still starting when its raylet died was seen to live on
    past 15 s (a ``killpg`` of the keeper's group never reached it)."""
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (me, sid):
            continue
        with contextlib.suppress(OSError):
            if os.getsid(int(entry)) == sid and not is_zombie(int(entry)):
                out.append(int(entry))
    return out


def _signal_session(sid: int, signum: int) -> list[int]:
    """Send ``signum`` to the live members of session ``sid``; returns them."""
    members = session_members(sid)
    for pid in members:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    return members


def _stop_session() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sid = os.getsid(0)
    members = set(session_members(sid))
    _signal_session(sid, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_S
    while session_members(sid) and time.monotonic() < deadline:
        time.sleep(0.05)
    _kill_others()
    _remove_semaphores(members)


def _remove_semaphores(pids: set[int], shm: str = leaks.SHM_DIR) -> None:
    """Remove the named semaphores of the cluster's raylet (of any of ``pids``).

    A raylet makes two for every channel of a compiled graph
    (``sem.hdr<raylet pid>-…``, ``sem.obj<raylet pid>-…``) and removes them when
    the graph's driver disconnects; a driver that was SIGKILLed with its cluster
    (C13) never does, and they would outlive the run."""
    with contextlib.suppress(OSError):
        for name in os.listdir(shm):
            rest = name.removeprefix(leaks.SEMAPHORE_PREFIX)
            owner = rest[3:].partition("-")[0]
            if rest != name and rest[:3] in ("hdr", "obj") and owner.isdigit() and int(owner) in pids:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(shm, name))


def _write_token(path: str) -> None:
    """A fresh token (256 random bits, as Ray's own generator makes), readable by
    this user alone, named to this process's children: ``ray start`` and through
    it every Ray process of the cluster."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secrets.token_hex(32))
    os.environ[_TOKEN_PATH] = path


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _start_head(
    cmd: list[str], temp_dir: str, ports: list[int], start_s: float
) -> tuple[subprocess.Popen[bytes], int] | str:
    """Run ``ray start`` on the first of ``ports`` it can bind: the started
    process and its port, or why it did not start. A start that failed because
    its port was taken, or whose raylet was too slow to register on a loaded
    machine, is tried again on the next port; any other failure is final."""
    deadline = time.monotonic() + start_s
    why = "no port to try"
    for attempt, port in enumerate(ports, 1):
        log_path = os.path.join(temp_dir, f"ray-start-{attempt}.log")
        with open(log_path, "wb") as log:
            ray_start = subprocess.Popen(
                [*cmd, f"--port={port}"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        while True:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            if "Ray runtime started" in text:
                return ray_start, port
            if ray_start.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if ray_start.poll() is None:
            ray_start.kill()
        ray_start.wait()
        tail = " | ".join(text.strip().splitlines()[-5:])
        why = f"ray start (port {port}, try {attempt} of {len(ports)}) exited with {ray_start.returncode}: {tail}"
        if not _worth_another_try(text) or time.monotonic() > deadline:
            return why
        _kill_others()
    return why


def _keep(death_fd: int, num_cpus: str, num_gpus: str, start_s: float | None = None, resources: str = "") -> None:
    """Start the cluster within ``start_s`` (default :func:`ray_start_bound`), then keep it until told."""
    # A keeper told to stop (SIGTERM, say by a process manager) stops its cluster first.
    signal.signal(signal.SIGTERM, _terminated)
    # Short: Ray puts unix sockets under it, whose paths may not exceed 107 bytes.
    temp_dir = tempfile.mkdtemp(prefix="hray-")  # mode 0700: the token's folder
    cmd = [
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={num_cpus}",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
    ]
    if num_gpus:
        cmd.append(f"--num-gpus={num_gpus}")
    if resources:
        cmd.append(f"--resources={resources}")
    # The cluster's processes (actors included) keep their temporary files in
    # its folder too: they go with the cluster, even those of an actor killed
    # with its caller (C13), which cannot remove its own.
    os.environ["TMPDIR"] = temp_dir
    try:
        _write_token(os.path.join(temp_dir, _TOKEN_FILE))
        started = _start_head(cmd, temp_dir, _candidate_ports(), ray_start_bound() if start_s is None else start_s)
        if isinstance(started, str):
            print(f"failed {started}", flush=True)
            return
        ray_start, port = started
        print(f"ready 127.0.0.1:{port} {temp_dir}", flush=True)
        # Until the caller closes the pipe or dies, or the cluster ends by itself.
        with selectors.DefaultSelector() as sel:
            sel.register(death_fd, selectors.EVENT_READ, "caller")
            sel.register(os.pidfd_open(ray_start.pid), selectors.EVENT_READ, "cluster")
            while True:
                for key, _ in sel.select():
                    if key.data == "cluster" or not os.read(death_fd, 1):
                        return
    finally:
        _stop_session()
        shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    _keep(int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), *sys.argv[5:6])
