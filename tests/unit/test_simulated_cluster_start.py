"""A simulated cluster's ``ray start`` that failed only for Ray's own fixed 30 s
wait for its raylet (a loaded machine: CI's head start "timed out during
startup" as four jobs started at once) is started again, after what it left on
its machine is killed; any other failure, or one past its tries or its time, is not."""

from __future__ import annotations

import time
from typing import Any

import pytest

from harness.executors.ray import cluster as ray_cluster
from harness.executors.ray import simulated_cluster
from harness.executors.ray.simulated_cluster import SimulatedCluster

SLOW = "Exception: The current node timed out during startup. This could happen because some of the raylet failed"


class _Exited:
    def poll(self) -> int | None:
        return 1

    def wait(self, timeout: float | None = None) -> int:
        return 1


class _Running(_Exited):
    def poll(self) -> int | None:
        return None


class _Nodes:
    world_pid = 1000
    world_address = "10.213.0.254"
    nodes = [type("N", (), {"init": 2000})()]

    def close(self) -> None:
        pass


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> tuple[SimulatedCluster, list[Any]]:
    seen: list[Any] = []
    monkeypatch.setattr(simulated_cluster, "kill_machine", lambda pid: seen.append(("killed", pid)) or [])
    made = SimulatedCluster(_Nodes(), 2)  # type: ignore[arg-type]

    def ray_start(node: int | None, role: list[str]) -> None:
        seen.append(("started", node, role))
        made._tries[node] = made._tries.get(node, 0) + 1
        made._starts[node] = _Running()  # type: ignore[assignment]

    monkeypatch.setattr(made, "_ray_start", ray_start)
    made._roles = {None: ["--head"], 0: ["--address=x"]}
    made._tries = {None: 1, 0: 1}
    return made, seen


def test_a_head_that_missed_rays_raylet_wait_is_started_again_after_its_leftovers_are_killed(cluster: Any) -> None:
    made, seen = cluster
    made._starts[None] = _Exited()
    assert made._start_again(None, SLOW, time.monotonic() + 60)
    assert seen == [("killed", 1000), ("started", None, ["--head"])]


def test_a_node_is_started_again_on_its_own_machine(cluster: Any) -> None:
    made, seen = cluster
    made._starts[0] = _Exited()
    assert made._start_again(0, SLOW, time.monotonic() + 60)
    assert seen == [("killed", 2000), ("started", 0, ["--address=x"])]


def test_other_failures_a_running_start_and_spent_tries_or_time_are_not_tried_again(cluster: Any) -> None:
    made, seen = cluster
    made._starts[None] = _Exited()
    assert not made._start_again(None, "ValueError: bad option --nope", time.monotonic() + 60)
    made._starts[0] = _Running()
    assert not made._start_again(0, SLOW, time.monotonic() + 60)
    made._tries[None] = simulated_cluster._START_TRIES
    assert not made._start_again(None, SLOW, time.monotonic() + 60)
    made._tries[None] = 1
    assert not made._start_again(None, SLOW, time.monotonic() - 1)
    assert seen == []


def test_the_start_bound_stretches_on_a_loaded_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    deadlines: list[float] = []
    monkeypatch.setattr(ray_cluster, "start_up_scale", lambda: 6.0)
    monkeypatch.setattr(simulated_cluster, "Nodes", lambda count: _Nodes())
    monkeypatch.setattr(SimulatedCluster, "_ray_start", lambda self, node, role: None)
    monkeypatch.setattr(SimulatedCluster, "_ready", lambda self, nodes, deadline: deadlines.append(deadline))
    now = time.monotonic()
    SimulatedCluster.start(1)
    assert deadlines and all(d - now == pytest.approx(720.0, abs=5) for d in deadlines), deadlines
    SimulatedCluster.start(1, timeout_s=30)
    assert deadlines[-1] - now == pytest.approx(30.0, abs=5), deadlines
