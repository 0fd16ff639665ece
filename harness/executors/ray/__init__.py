"""``ray`` and ``ray-graph``: workers as Ray actors, the same contract as ``mp``
on a real Ray runtime. ``ray`` is how vLLM runs Ray today (``RayExecutorV2``):
Ray places the rank actors, starts them and reports their deaths, and the
calls travel through channels of our own (``ray.channels``: ``mp``'s
shared-memory rings on the caller's node, a socket to other nodes).
``ray-graph`` drives the same actors through a Ray Compiled Graph, vLLM's
older Ray executor (``ray.graph``), kept to show what that design costs.

The factory and its declarations live here, apart from the executor
(``ray.executor``): loading the backend must not import Ray, whose settings
(authentication among them) are read from the environment at import, so that
a test process gets the environment of the run's cluster before Ray loads.

See ``ray.graph`` and ``ray.executor`` for the data flows.

This package holds the factories (here), the executors (``executor``, ``graph``),
the channels of ``ray`` (``channels``), the
run's local cluster (``cluster``, whose keeper process runs that module with
``python -m``: nothing here imports it at the top) and a multi-node cluster on
simulated nodes (``simulated_cluster``). It may import what
``harness.executors`` may.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from harness.contract import ExecutorConfig, declare
from harness.system.modules import module_installed

if not module_installed("ray"):
    raise ImportError("No module named 'ray'", name="ray")

if TYPE_CHECKING:
    from harness.executors.ray.executor import RayExecutor
    from harness.executors.ray.graph import RayGraphExecutor

__all__ = ["RayExecutor", "RayGraphExecutor", "create", "create_graph", "local_cluster"]


def __getattr__(name: str) -> Any:
    if name == "RayExecutor":
        from harness.executors.ray.executor import RayExecutor

        return RayExecutor
    if name == "RayGraphExecutor":
        from harness.executors.ray.graph import RayGraphExecutor

        return RayGraphExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- a cluster for a whole test run --------------------------------------------

#: Set to 0 to make every executor of a run start its own local cluster instead.
SESSION_CLUSTER_ENV = "HARNESS_RAY_SESSION_CLUSTER"


@contextlib.contextmanager
def local_cluster(num_cpus: int | None = None) -> Iterator[dict[str, str]]:
    """A single-node Ray cluster for the length of a run, started on loopback,
    stopped at the end or when this process dies; yields the environment that
    points executors at it (its address and its own authentication token).

    Uses the cluster named by ``RAY_ADDRESS`` instead when one is set, and none
    at all (each executor then starts its own) when ``HARNESS_RAY_SESSION_CLUSTER=0``.
    """
    if os.environ.get("RAY_ADDRESS") or os.environ.get(SESSION_CLUSTER_ENV, "1") == "0":
        yield {}
        return
    # Here, not at the top: the cluster's keeper runs that module with -m.
    from harness.executors.ray.cluster import LocalCluster

    cluster = LocalCluster.start(num_cpus if num_cpus is not None else max(16, 2 * (os.cpu_count() or 1)))
    try:
        # The test processes import Ray after this is set, so they take the
        # cluster's authentication mode and token (Ray reads them when imported).
        yield cluster.driver_env()
    finally:
        cluster.stop()


def create(config: ExecutorConfig) -> RayExecutor:
    """The ``ray`` backend factory: Ray actors, calls through ``ray.channels``."""
    from harness.executors.ray.executor import RayExecutor

    return RayExecutor(config)


def create_graph(config: ExecutorConfig) -> RayGraphExecutor:
    """The ``ray-graph`` backend factory: calls through a compiled graph."""
    from harness.executors.ray.graph import RayGraphExecutor

    return RayGraphExecutor(config)


_RAY_SERVERS = (
    "Ray's own gRPC servers (GCS, raylet, and one in every worker and driver) listen on all "
    "interfaces, and Ray has no setting to bind them to loopback; nor does its node stay on "
    "loopback: ray start --node-ip-address=127.0.0.1 gives the node the machine's own address"
)


def _declare(factory: Callable[..., Any], nodes: tuple[int, ...], unsupported: dict[str, str]) -> None:
    """What both Ray backends declare, with what each does not support beside C23."""
    declare(
        factory,
        unsupported={"C23": _RAY_SERVERS, **unsupported},
        # Ray starts the actor processes itself: spawn/fork mean nothing to it.
        start_methods=("spawn",),
        # Ranks node by node on as many nodes of the cluster (ExecutorConfig.nodes):
        # tests/distributed/test_simulated_cluster.py runs them on simulated nodes.
        nodes=nodes,
        # One cluster for a whole run (both backends share it): connecting takes a
        # fraction of a second, starting one seconds.
        session=local_cluster,
    )


_declare(create, (1, 2, 4), {})
_declare(
    create_graph,
    (1,),
    {
        "C10": (
            "Ray 2.60's compiled graphs leave TCP sockets in the caller: about 1.5 per graph while the caller "
            "stays connected, about 3 per graph when it disconnects after each (closed, bound to the driver's "
            "gRPC port, kept open by Ray past the graph's teardown, its actors' exit and ray.shutdown), so ten "
            "create/shutdown cycles grow the caller's descriptors (32 to 62); processes, threads, shared memory "
            "and semaphores over the cycles are checked by tests/distributed/test_ray_backend.py"
        ),
        "C25": (
            "Ray 2.60's compiled-graph ranks wait for their next input in Ray's channel read, which spins "
            "(sched_yield) and never sleeps: idle, each rank burns about half a core (harness bench's idle "
            "workers' CPU), the 100 % of a core vLLM's users reported of its compiled-graph executor"
        ),
    },
)
