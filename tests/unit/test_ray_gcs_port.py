"""The local Ray cluster's GCS port: chosen where nobody else is handed ports."""

from __future__ import annotations

import pytest

from harness.executors.ray import cluster


def test_the_gcs_port_lies_below_the_kernels_ephemeral_range_and_above_rays_worker_ports() -> None:
    low, _ = cluster._ephemeral_range()
    ports = {cluster._gcs_port() for _ in range(50)}
    assert all(cluster._LOWEST_PORT <= p < low for p in ports), sorted(ports)
    assert len(ports) > 1, "every choice was the same port"


def test_a_start_that_lost_its_port_is_told_apart_from_other_failures() -> None:
    lost = "Check failed: server_ Failed to start the grpc server. The specified port is 35923."
    assert cluster._port_taken(lost)
    assert not cluster._port_taken("RuntimeError: Failed to start GCS. Out of memory")


def test_a_start_whose_raylet_was_too_slow_for_rays_own_wait_is_tried_again_and_others_are_final() -> None:
    """Ray waits a fixed 30 s for its raylet to register: a loaded machine's
    failure, worth another start; a start that failed for another reason is not."""
    slow = "Exception: The current node timed out during startup. This could happen because some of the raylet"
    assert cluster._worth_another_try(slow)
    assert cluster._worth_another_try("Failed to start the grpc server. The specified port is 35923.")
    assert not cluster._worth_another_try("RuntimeError: Failed to start GCS. Out of memory")


def test_the_keepers_start_up_bound_stretches_on_a_loaded_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "start_up_scale", lambda: 6.0)
    assert cluster.ray_start_bound() == 6 * cluster._START_S
    monkeypatch.setattr(cluster, "start_up_scale", lambda: 1.0)
    assert cluster.ray_start_bound() == cluster._START_S
