"""The backends' run-wide resources for a pytest run: each backend's session
(``LoadedBackend.session``: a Ray cluster), opened once in the pytest process
(``harness.backends.open_session``) before the first test of the backend, and
the simulated multi-node clusters of the run's node counts; all left when the
run ends. A test gets their environment (``env``, ``nodes_env``), not the
pytest process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pytest

from harness.backends import LoadedBackend, open_session

if TYPE_CHECKING:
    from harness.executors.ray.simulated_cluster import SimulatedCluster

__all__ = ["Sessions"]

#: Logical CPUs of each simulated node: room for the ranks of a few executors at once.
_NODE_CPUS = 16


class Sessions:
    """The backends' run-wide resources (``LoadedBackend.session``, e.g. a Ray
    cluster): each entered once, in this (the pytest) process, before the first
    test of its backend runs, and left when the run ends."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._env: dict[Callable[[], Any], Mapping[str, str] | BaseException] = {}
        self._clusters: dict[int, SimulatedCluster | BaseException] = {}
        self._owner = os.getpid()

    def ensure(self, backend: LoadedBackend) -> None:
        # Keyed by the session itself: backends that share one (ray, ray-graph) share its cluster.
        session = backend.session
        if session is None or session in self._env or os.getpid() != self._owner:
            return
        try:
            # Its environment goes to each test's process, not this one's.
            self._env[session] = self._stack.enter_context(open_session(backend, set_environ=False))
        except Exception as exc:  # noqa: BLE001 - its tests fail with it; the run goes on
            self._env[session] = exc

    def env(self, backend: LoadedBackend) -> Mapping[str, str]:
        """The environment for a test of ``backend``; fails the test if its session did not start."""
        self.ensure(backend)
        env = self._env.get(backend.session, {}) if backend.session is not None else {}
        if isinstance(env, BaseException):
            pytest.fail(f"backend {backend.name!r}: its run-wide session could not start: {env}", pytrace=False)
        return env

    def ensure_nodes(self, count: int) -> None:
        """A Ray cluster on ``count`` simulated nodes, for the run's variants of
        that many nodes; none where ``RAY_ADDRESS`` names a cluster (they run there)."""
        if count in self._clusters or os.getpid() != self._owner or os.environ.get("RAY_ADDRESS"):
            return
        try:
            from harness.executors.ray.simulated_cluster import SimulatedCluster

            self._clusters[count] = self._stack.enter_context(SimulatedCluster.start(count, _NODE_CPUS))
        except Exception as exc:  # noqa: BLE001 - its tests fail with it; the run goes on
            self._clusters[count] = exc

    def heal(self, count: int) -> None:
        """Bring back the nodes of the simulated cluster of ``count`` nodes that a
        test's fault took (C8's node checks kill one, or cut it off), before the
        next test drives it; a cluster that cannot be healed fails later tests."""
        cluster = self._clusters.get(count)
        if cluster is None or isinstance(cluster, BaseException) or os.getpid() != self._owner:
            return
        try:
            cluster.heal()
        except Exception as exc:  # noqa: BLE001 - its tests fail with it; the run goes on
            self._clusters[count] = RuntimeError(f"a node lost in an earlier test could not be brought back: {exc}")

    def world(self, count: int) -> int | None:
        """The host pid of the world's init of the simulated cluster of ``count``
        nodes (a test process of its variants joins the world), if one runs."""
        cluster = self._clusters.get(count)
        return None if cluster is None or isinstance(cluster, BaseException) else cluster.nodes.world_pid

    def node_inits(self, count: int) -> dict[str, int]:
        """The simulated nodes of the cluster of ``count`` nodes, by name ("node 1"):
        the host pid of each one's init; none where no simulated cluster runs."""
        cluster = self._clusters.get(count)
        if cluster is None or isinstance(cluster, BaseException):
            return {}
        return {f"node {n.index}": n.init for n in cluster.nodes.nodes}

    def nodes_env(self, count: int) -> Mapping[str, str]:
        """The environment for a test of a ``count``-node variant; fails the test
        if its cluster did not start, skips it where it cannot reach the cluster."""
        self.ensure_nodes(count)
        cluster = self._clusters.get(count)
        if cluster is None:
            return {}  # RAY_ADDRESS: the test drives the cluster it names
        if isinstance(cluster, BaseException):
            pytest.fail(f"the simulated cluster of {count} nodes could not start: {cluster}", pytrace=False)
        if os.getpid() == self._owner:
            pytest.skip(
                f"a driver of simulated nodes runs in a test process of its own, and this run has none "
                f"(--harness-no-isolate, or no fork here): it cannot reach the {count} nodes"
            )
        return cluster.driver_settings()

    def close(self) -> None:
        if os.getpid() == self._owner:
            self._stack.close()
