"""The `ray` backend's executor: one Ray actor per rank, driven from the caller's thread, like `mp`.

Data flow::

    caller thread ─ collective_rpc ─► pickle the call once ─► (ray.put once if large)
         ▲                                   │ actor.execute.remote(call id, body) for each rank, under the queue lock
         │                                   ▼ (Ray runs an actor's tasks in submission order)
         │                          rank actors 0 … N-1, in one placement group (one bundle per rank)
         │                                   │ each returns its pickled Reply: one ObjectRef per rank
         └─ FutureQueue: FIFO, drained inside result() on the caller's thread:
            ray.wait on the oldest call's refs, in short slices (so shutdown is seen)

    monitor thread: blocks on pidfds of the actor processes (no polling when the
    actors share this host; a 1 s look at Ray's actor table otherwise); on a
    death it fails every pending call and runs the failure callbacks, once.

Ray is process-wide: executors share this process's connection. The first one
connects to the cluster named by ``address`` or ``RAY_ADDRESS``, or else starts
a local single-node cluster (``ray.cluster``: it goes with this process, even
when this process is SIGKILLed); the last one to shut down disconnects, and stops
the cluster only if an executor started it. A Ray already initialised by the
caller is used as it is and never shut down here.

On one node (``nodes=1``) the process group meets through a file store in a
folder rank 0 creates, so the placement group is STRICT_PACK: every rank on
one node. Across k nodes the placement group is STRICT_SPREAD, one bundle of
world_size/k ranks per node, rank r in bundle r // (world_size/k) (ranks node
by node, as vLLM lays out tensor parallelism); machines share no file system,
so rank 0 hosts a TCP store at its node's address, and gloo's peer sockets are
on each node's interface for that address::

    node A: ranks 0 … n-1 (rank 0: TCP store at A's address) ─┐ gloo over each
    node B: ranks n … 2n-1                                    ─┘ node's interface

Ray's own servers (GCS, raylet, each worker's gRPC server) listen on all
interfaces, which Ray cannot change: C23 is declared.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import selectors
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from harness.contract import (
    ExecutorConfig,
    ExecutorShutdownError,
    WorkerDiedError,
    WorkerInitError,
)
from harness.executors._group import Failure, GroupExecutor
from harness.executors.futures import FutureQueue, PendingCall, Reply
from harness.executors.mp.worker import (
    Request,
    Worker,
    encode_reply,
    error_reply,
    init_distributed,
    run_call,
)
from harness.executors.ray.channels import CallerChannels, LocalPlan, RankChannel, RemotePlan
from harness.executors.ray.cluster import LocalCluster
from harness.system.environ import set_environ

__all__ = ["RayExecutor"]

# The longest one ray.wait blocks before looking at the executor's state again.
_WAIT_SLICE_S = 0.25
# How long shutdown lets the actors tear down their process group politely.
_TEARDOWN_S = 2.0
# How long shutdown waits for killed actor processes to exit.
_EXIT_S = 10.0
# How often the monitor looks at actors that run on another host.
_REMOTE_POLL_S = 1.0


class _RankActor:
    """One rank. Its tasks run one at a time in submission order (a plain, not
    threaded, actor), so every rank issues collectives in the same order."""

    def __init__(self, rank: int, world_size: int, device: str, env: Mapping[str, str]) -> None:
        os.environ.update(env)
        self._rank = rank
        self._world_size = world_size
        self._device = device
        self._worker: Worker | None = None
        self._store: Any = None  # rank 0 across nodes: the TCP store it hosts
        self._channel: RankChannel | None = None

    def where(self) -> tuple[str, int, str]:
        """This actor's node id, pid (in its machine's PID namespace) and node address."""
        return ray.get_runtime_context().get_node_id(), os.getpid(), _node_address()

    def make_store_dir(self) -> str:
        return tempfile.mkdtemp(prefix="harness-ray-")

    def host_store(self, timeout_s: float) -> tuple[str, int]:
        """Rank 0 across nodes: a TCP store at this node's address, for every rank to meet at."""
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        address = _node_address()
        self._store = TCPStore(address, 0, self._world_size, True, timedelta(seconds=timeout_s), wait_for_workers=False)
        return address, int(self._store.port)

    def setup(
        self, dist_backend: str, store_path: str, timeout_s: float, tcp_store: tuple[str, int] | None = None
    ) -> int:
        store, ifname = None, None
        if tcp_store is not None:
            from torch.distributed import TCPStore  # type: ignore[attr-defined]

            ifname = _interface_of(_node_address())
            if self._rank == 0:
                store = self._store
            else:
                store = TCPStore(*tcp_store, self._world_size, False, timedelta(seconds=timeout_s))
        init_distributed(
            self._rank, self._world_size, self._device, dist_backend, store_path, timeout_s, store=store, ifname=ifname
        )
        self._worker = Worker(self._rank, self._world_size, self._device)
        return os.getpid()

    def attach(self, plan: LocalPlan | RemotePlan, timeout_s: float) -> None:
        """Open this rank's end of its channel to the caller (``ray.channels``)."""
        self._channel = RankChannel(self._rank, plan, timeout_s)

    def serve(self, store_dir: str | None) -> None:
        """Run the caller's calls until it asks to stop (a long task: this actor
        takes no other until then), then leave the process group."""
        assert self._worker is not None and self._channel is not None, "serve() before setup() and attach()"
        try:
            self._channel.serve(self._worker)
        finally:
            self.teardown(store_dir)

    def execute(self, call_id: int, body: bytes) -> bytes:
        assert self._worker is not None, "execute() before setup()"
        try:
            request = Request(*pickle.loads(body))
        except BaseException as exc:  # noqa: BLE001 - e.g. a callable this worker cannot import
            return encode_reply(error_reply(self._rank, call_id, exc))
        del body
        return encode_reply(run_call(self._worker, call_id, request))

    def teardown(self, store_dir: str | None) -> None:
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        finally:
            if store_dir:
                shutil.rmtree(store_dir, ignore_errors=True)


_RemoteRankActor = ray.remote(_RankActor)


def _node_address() -> str:
    """This Ray node's address, as the cluster knows it."""
    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def _interface_of(address: str) -> str:
    """The network interface that holds ``address`` on this machine."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == address for a in addresses):
            return str(name)
    raise RuntimeError(f"no network interface of this machine has its Ray node address {address!r}")


# ---- the process's Ray connection, shared by every executor ------------------


class _Runtime:
    """Counts the executors using Ray; connects for the first, disconnects after the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._ours = False  # whether ray.init was called here (and so ray.shutdown is ours too)
        self.cluster: LocalCluster | None = None  # the cluster started here, if any
        self._saved_env: dict[str, str | None] = {}  # what the cluster's driver settings replaced

    def acquire(self, address: str | None, num_cpus: int) -> None:
        with self._lock:
            if self._users == 0 and not ray.is_initialized():
                address = address or os.environ.get("RAY_ADDRESS") or None
                try:
                    if address is None:
                        self.cluster = LocalCluster.start(num_cpus)
                        # This process drives the cluster with its token: Ray reads
                        # the token from the environment (nothing in ~/.ray/).
                        driver_env = self.cluster.driver_env()
                        del driver_env["RAY_ADDRESS"]
                        self._saved_env = set_environ(driver_env)
                        _reload_auth()
                        # Its own address, not "auto": that scans the machine's
                        # processes for clusters and warns of every other run's.
                        ray.init(
                            address=self.cluster.address,
                            _temp_dir=self.cluster.temp_dir,
                            log_to_driver=False,
                            configure_logging=False,
                        )
                    else:
                        # Ray caches its authentication settings when first read, and
                        # the environment may name this cluster's token only since
                        # (a run-wide session entered after an executor of its own).
                        _reload_auth()
                        ray.init(address=address, log_to_driver=False, configure_logging=False)
                except Exception as exc:
                    self._disconnected()
                    where = f"the cluster at {address!r}" if address else "a local Ray cluster"
                    raise WorkerInitError(f"ray: could not connect to {where}: {exc}{_token_hint(exc)}") from exc
                self._ours = True
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._ours:
                self._ours = False
                ray.shutdown()
                self._disconnected()

    def _disconnected(self) -> None:
        """Put back the environment the local cluster's settings replaced, then stop it."""
        if self._saved_env:
            set_environ(self._saved_env)
            self._saved_env = {}
            _reload_auth()
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None


def _reload_auth() -> None:
    """Make this process's Ray read its authentication settings again (it caches
    the mode and the token once read). Best effort: the hooks are Ray's internals."""
    with contextlib.suppress(ImportError, AttributeError):
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

        # The config first: a token reloaded while the config still says token
        # mode must find the file (Ray's own test helpers keep this order).
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def _token_hint(exc: BaseException) -> str:
    """How to give this process a cluster's token, when a missing one may be the
    trouble: the error names authentication, or no token is configured at all
    (a driver without one fails to connect, after Ray's retries, as if the
    cluster were not there)."""
    text = f"{type(exc).__name__} {exc}".lower()
    named = any(word in text for word in ("authentication", "unauthenticated", "auth token"))
    configured = (
        os.environ.get("RAY_AUTH_TOKEN")
        or os.environ.get("RAY_AUTH_TOKEN_PATH")
        or os.path.exists(os.path.expanduser("~/.ray/auth_token"))
    )
    if not named and configured:
        return ""
    return (
        " | if the cluster uses token authentication (Ray's default), give this process its token: "
        "RAY_AUTH_TOKEN=<token>, or RAY_AUTH_TOKEN_PATH=<file holding it> (default ~/.ray/auth_token), "
        "with RAY_AUTH_MODE=token; `ray get-auth-token` prints it on the cluster's head node"
    )


_RUNTIME = _Runtime()


def _local_num_cpus(world_size: int) -> int:
    # Room for two executors of this size at once (C18); Ray's CPUs are logical.
    return max(os.cpu_count() or 1, 2 * world_size)


# ---- one executor's actors ----------------------------------------------------


class _Group:
    """Everything one executor owns, apart from the executor object so that
    ``weakref.finalize`` can close it when the executor is dropped (C12)."""

    #: The actors' and placement group's Ray lifetime: None, they go with this
    #: driver (Ray kills them when it dies: C13); "detached" would outlive it.
    lifetime: str | None = None
    #: The rank actors' Ray class (``ray.graph`` gives its own, with the graph's methods).
    actor_class: Any = None

    def __init__(self, config: ExecutorConfig, address: str | None) -> None:
        self.config = config
        self.address = address
        self.closed = False
        self._close_lock = threading.Lock()
        self.failure = Failure()
        self.actors: list[Any] = []
        self.actor_ids: list[str] = []
        self.pids: list[int | None] = []
        self.addresses: list[str] = []  # each rank's Ray node address
        self.local: list[bool] = []
        self.pidfds: list[int | None] = []
        self.pg: PlacementGroup | None = None
        self.store_dir: str | None = None
        self.store_local = False
        self.queue = FutureQueue(self._receive)
        self.transport: CallerChannels | None = None
        self.serving: list[Any] = []  # each rank's serve task
        self.monitor: threading.Thread | None = None
        self._stop_r, self._stop_w = os.pipe()
        self._runtime_held = False

    # ---- start-up ---------------------------------------------------------

    def start(self) -> None:
        cfg = self.config
        deadline = time.monotonic() + cfg.init_timeout_s
        _RUNTIME.acquire(self.address, _local_num_cpus(cfg.world_size))
        self._runtime_held = True
        gpu = cfg.device == "cuda"
        # One bundle per rank on one node; one bundle per node (of its ranks) across nodes.
        per_bundle = cfg.world_size // cfg.nodes if cfg.nodes > 1 else 1
        bundle = {"GPU": float(per_bundle)} if gpu else {"CPU": float(per_bundle)}
        count = cfg.nodes if cfg.nodes > 1 else cfg.world_size
        strategy = "STRICT_SPREAD" if cfg.nodes > 1 else "STRICT_PACK"
        self.pg = placement_group([dict(bundle) for _ in range(count)], strategy=strategy, lifetime=self.lifetime)
        ready, _ = ray.wait([self.pg.ready()], timeout=_remaining(deadline))
        if not ready:
            total = ray.cluster_resources()  # type: ignore[no-untyped-call]
            free = ray.available_resources()  # type: ignore[no-untyped-call]
            where = f"{cfg.nodes} different nodes" if cfg.nodes > 1 else "one node"
            raise WorkerInitError(
                f"ray: a placement group of {count} bundles {bundle} could not be placed on {where} "
                f"within init_timeout_s={cfg.init_timeout_s:g} s; the cluster has {total}, of which {free} are free"
                + (f", on {_alive_nodes()} live nodes" if cfg.nodes > 1 else "")
            )
        env = dict(cfg.env)
        for rank in range(cfg.world_size):
            actor = (
                (self.actor_class or _RemoteRankActor)
                .options(  # type: ignore[attr-defined]
                    num_cpus=0 if gpu else 1,
                    num_gpus=1 if gpu else 0,
                    max_restarts=0,
                    name=None,
                    lifetime=self.lifetime,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=self.pg, placement_group_bundle_index=rank // per_bundle
                    ),
                )
                .remote(rank, cfg.world_size, cfg.device, env)
            )
            self.actors.append(actor)
            self.actor_ids.append(actor._actor_id.hex())  # type: ignore[union-attr]
        here = ray.get_runtime_context().get_node_id()
        places = self._init_step("start", [a.where.remote() for a in self.actors], deadline)
        for node_id, pid, address in places:
            self.addresses.append(address)
            self.pids.append(pid)
            self.local.append(node_id == here)
            self.pidfds.append(_pidfd(pid) if node_id == here else None)
        store_path, tcp_store = self._rendezvous(deadline)
        self._init_step(
            "initialise torch.distributed",
            [a.setup.remote(cfg.dist_backend, store_path, cfg.init_timeout_s, tcp_store) for a in self.actors],
            deadline,
        )
        self._open_calls(deadline)
        self.monitor = threading.Thread(target=self._monitor, name="harness-ray-monitor", daemon=True)
        self.monitor.start()

    def _open_calls(self, deadline: float) -> None:
        """Give every rank its channel (``ray.channels``) and set it serving."""
        transport = self.transport = CallerChannels(self.local, _node_address())
        transport.pidfds = {r: fd for r, fd in enumerate(self.pidfds) if fd is not None}
        timeout = max(0.1, _remaining(deadline))
        self._init_step(
            "attach to its channel",
            [a.attach.remote(transport.plan(r), timeout) for r, a in enumerate(self.actors)],
            deadline,
        )
        transport.attached(deadline)
        store_dir = self.store_dir if not self.store_local else None
        self.serving = [a.serve.remote(store_dir if r == 0 else None) for r, a in enumerate(self.actors)]

    def _rendezvous(self, deadline: float) -> tuple[str, tuple[str, int] | None]:
        """Where the ranks' process group meets: a file store's path on one
        node, rank 0's TCP store (address, port) across nodes."""
        cfg = self.config
        if cfg.nodes > 1:
            # Machines share no file system: rank 0 hosts a TCP store at its node's address.
            return "", self._init_step("start", [self.actors[0].host_store.remote(cfg.init_timeout_s)], deadline)[0]
        self.store_dir = self._init_step("start", [self.actors[0].make_store_dir.remote()], deadline)[0]
        self.store_local = self.local[0]
        return os.path.join(str(self.store_dir), "store"), None

    def _init_step(self, what: str, refs: list[Any], deadline: float) -> list[Any]:
        """Wait for one start-up step on every rank; the first failure ends it."""
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        out: dict[int, Any] = {}
        pending = list(refs)
        while pending:
            remaining = _remaining(deadline)
            if remaining <= 0:
                missing = sorted(rank_of[r] for r in pending)
                raise WorkerInitError(
                    f"ranks {missing}: could not {what} within init_timeout_s={self.config.init_timeout_s:g} s"
                )
            ready, pending = ray.wait(pending, num_returns=1, timeout=min(remaining, _WAIT_SLICE_S))
            for ref in ready:
                rank = rank_of[ref]
                try:
                    out[rank] = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    raise WorkerInitError(f"rank {rank}: worker failed to {what}: {exc}") from None
        return [out[rank] for rank in range(len(refs))]

    # ---- calls ------------------------------------------------------------

    def send(self, call: PendingCall, body: bytes) -> None:
        """Write one registered call to every rank (under the queue lock)."""
        assert self.transport is not None
        try:
            self.transport.send(call, body, self.queue.pump)
        except BaseException:
            if self.transport.broken is not None:
                self.queue.fail_all(self.transport.broken)
            else:
                self.queue.discard(call)
            raise

    def _receive(self, timeout: float | None) -> list[Reply]:
        if self.closed:
            raise ExecutorShutdownError("executor was shut down")
        if self.failure.error is not None:
            raise self.failure.error
        assert self.transport is not None
        replies, dead, stopped = self.transport.collect(timeout)
        if stopped or self.closed:
            raise ExecutorShutdownError("the executor was shut down while the call was waiting")
        if dead and not replies:
            raise self.fail(min(dead), "its connection to the caller closed" if not self.local[min(dead)] else "")
        if self.failure.error is not None and not replies:
            raise self.failure.error
        return replies

    # ---- failure ----------------------------------------------------------

    def fail(self, rank: int, detail: str = "") -> WorkerDiedError:
        """Record that ``rank`` died: fail every call, run the callbacks once."""

        def died() -> WorkerDiedError:
            where = ""
            if rank < len(self.local) and not self.local[rank]:
                # Its pid is another machine's: say which one.
                where = f"on the node at {self.addresses[rank]}: "
            detail_ = detail or "its Ray actor process exited"
            return WorkerDiedError(rank, self.pids[rank] if rank < len(self.pids) else None, None, where + detail_)

        return self.failure.record(died, self.queue)

    def dead_rank(self) -> int | None:
        for rank, fd in enumerate(self.pidfds):
            if fd is not None:
                if _wait_readable(fd, 0):
                    return rank
            elif _actor_dead(self.actor_ids[rank]):
                return rank
        return None

    def _monitor(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            sel.register(self._stop_r, selectors.EVENT_READ, None)
            for rank, fd in enumerate(self.pidfds):
                if fd is not None:
                    sel.register(fd, selectors.EVENT_READ, rank)
            poll = None if all(self.local) else _REMOTE_POLL_S
            while not self.closed:
                events = sel.select(poll)
                if self.closed or any(key.data is None for key, _ in events):
                    return
                dead = [key.data for key, _ in events]
                if not dead and poll is not None:
                    dead = [r for r, local in enumerate(self.local) if not local and _actor_dead(self.actor_ids[r])]
                if dead:
                    self.fail(min(dead))
                    return
        finally:
            sel.close()

    # ---- shutdown ---------------------------------------------------------

    def close(self) -> None:
        """Stop the actors and release everything. Idempotent, bounded (C9)."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
        os.write(self._stop_w, b"x")  # wakes the monitor
        if self.transport is not None:
            self.transport.stop()  # wakes a call blocked in another thread
        try:
            self._stop_actors()
        finally:
            self.queue.fail_all(ExecutorShutdownError("executor was shut down"))
            if self.transport is not None:
                self.transport.close()
                self.transport = None
            if self.monitor is not None and self.monitor is not threading.current_thread():
                self.monitor.join(_EXIT_S)
            for fd in self.pidfds:
                if fd is not None:
                    os.close(fd)
            self.pidfds = []
            os.close(self._stop_r)
            os.close(self._stop_w)
            if self.store_dir and self.store_local:
                shutil.rmtree(self.store_dir, ignore_errors=True)
            if self._runtime_held:
                self._runtime_held = False
                _RUNTIME.release()

    def _stop_calls(self) -> None:
        """Ask the ranks to stop serving and leave their process group, within
        a bound (Ray then kills them; closing the channels ends any left)."""
        if self.transport is None:
            return
        self.transport.shutdown_workers()
        if self.serving:
            ray.wait(self.serving, num_returns=len(self.serving), timeout=_TEARDOWN_S)

    def _stop_actors(self) -> None:
        if not ray.is_initialized():
            return  # the caller shut Ray down under us: the actors went with it
        if self.actors and self.failure.error is None and self.pids:
            # Politely first, so that gloo/NCCL close their connections; a rank
            # hung in a call never gets to it and is killed below.
            self._stop_calls()
        for actor in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        deadline = time.monotonic() + _EXIT_S
        for fd in self.pidfds:
            if fd is not None:
                _wait_readable(fd, _remaining(deadline))
        self.actors = []
        if self.pg is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(self.pg)
            self.pg = None


def _alive_nodes() -> int:
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return sum(1 for n in nodes if n.get("Alive"))


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):  # gone already, or not Linux
        return None


def _wait_readable(fd: int, timeout: float | None) -> bool:
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        return bool(sel.select(timeout))


def _actor_dead(actor_id: str) -> bool:
    try:
        from ray._private import state

        info = state.actors(actor_id=actor_id)
    except Exception:  # noqa: BLE001 - no answer is no news
        return False
    return bool(info) and info.get("State") == "DEAD"


class RayExecutor(GroupExecutor):
    """Workers as Ray actors. See the module docstring for the data flow.

    ``address``: a Ray cluster to connect to (default: ``RAY_ADDRESS``, else a
    local cluster started for this process)."""

    def __init__(self, config: ExecutorConfig, *, address: str | None = None) -> None:
        super().__init__(config, lambda: _Group(config, address))
