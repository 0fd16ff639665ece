"""The local Ray cluster's GCS port: chosen where nobody else is handed ports."""

from __future__ import annotations

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
