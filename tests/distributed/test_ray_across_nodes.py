"""The ``ray`` backend across nodes (``ExecutorConfig.nodes``), on a Ray cluster
of simulated nodes (harness.executors.ray.simulated_cluster): the ranks run
node by node on machines that share no file system, the process group holds
across them, and a node killed under a pending call fails it within 30 s,
runs the failure callbacks once and makes ``check_health()`` raise, with
``shutdown()`` still bounded.

The caller is a driver in the world (the cluster's login node). Each test runs
in its own forked process (``distributed``) and needs Ray and root.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from typing import IO, Any

import pytest

from harness.system.nodes import NODE_HOSTNAME, unavailable_reason

pytestmark = [
    pytest.mark.ray,
    pytest.mark.distributed,
    pytest.mark.timeout(420),
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"simulated nodes: {unavailable_reason()}"),
]

# The driver: one executor of 4 ranks on 2 nodes; it says what each rank saw,
# then (with "kill" on stdin) starts a long call on every rank and reports how
# the call, the callbacks, check_health and shutdown went once the test kills
# node 1 (the ranks of one node; node 0 is the cluster's head).
DRIVER = textwrap.dedent(
    """
    import json, socket, sys, time
    from harness.contract import ExecutorConfig
    from harness.conformance import probes
    from harness.executors.ray.executor import RayExecutor

    def say(**what):
        print("said:", json.dumps(what), flush=True)

    ex = RayExecutor(ExecutorConfig(world_size=4, nodes=2, init_timeout_s=240))
    calls = []
    ex.register_failure_callback(lambda: calls.append(time.monotonic()))
    say(hosts=ex.collective_rpc(probes.hostname), info=ex.collective_rpc(probes.dist_info),
        collectives=ex.collective_rpc(probes.collectives), driver=socket.gethostname())
    sys.stdin.readline()
    pending = ex.collective_rpc(probes.sleep, args=(600,), non_block=True)
    say(pending=True)
    sys.stdin.readline()  # the node is dead
    killed = time.monotonic()
    try:
        pending.result(timeout=60)
        outcome = "returned"
    except Exception as exc:
        outcome = type(exc).__name__ + ": " + str(exc)[:200]
    failed_after = time.monotonic() - killed
    time.sleep(2)  # a second callback run would come now
    try:
        ex.check_health()
        health = "returned"
    except Exception as exc:
        health = type(exc).__name__
    start = time.monotonic()
    ex.shutdown()
    say(outcome=outcome, failed_after=failed_after, callbacks=len(calls),
        callback_after=(calls[0] - killed) if calls else None, health=health,
        shutdown_s=time.monotonic() - start)
    """
)


def _said(stream: IO[str]) -> dict[str, Any]:
    """The driver's next report ("said: {json}"); Ray prints into its output too."""
    passed = []
    for line in stream:
        if line.startswith("said: "):
            return dict(json.loads(line.removeprefix("said: ")))
        passed.append(line)
    raise AssertionError(f"the driver ended without reporting; it printed: {''.join(passed)[-3000:]}")


def test_ranks_run_node_by_node_the_group_holds_across_nodes_and_a_killed_node_fails_its_call() -> None:
    from harness.executors.ray.simulated_cluster import SimulatedCluster

    argv = [sys.executable, "-c", DRIVER]
    with (
        SimulatedCluster.start(2, cpus_per_node=2) as cluster,
        cluster.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as driver,
    ):
        assert driver.stdin is not None and driver.stdout is not None
        try:
            seen = _said(driver.stdout)
            hosts = seen["hosts"]
            assert hosts[0] == hosts[1] and hosts[2] == hosts[3] and hosts[0] != hosts[2], (
                f"ranks not node by node (rank r on node r // 2): {hosts}"
            )
            assert all(h.startswith(NODE_HOSTNAME) for h in hosts), f"a rank ran off the cluster's nodes: {hosts}"
            assert seen["driver"] != hosts[0] and seen["driver"] != hosts[2]
            assert [tuple(i[:3]) for i in seen["info"]] == [(r, r, 4) for r in range(4)]
            assert all(c["all_reduce"] == [10.0] * 4 for c in seen["collectives"]), seen["collectives"]
            assert all(c["all_gather"] == [[r, r * r] for r in range(4)] for c in seen["collectives"])
            assert all(c["broadcast"] == [0.0, 1.0, 2.0] for c in seen["collectives"])
            driver.stdin.write("go\n")
            driver.stdin.flush()
            assert _said(driver.stdout) == {"pending": True}
            time.sleep(2)  # the call reached every rank
            # Node 1, not the head (node 0 holds the cluster's GCS): its ranks' machine dies.
            assert f"{NODE_HOSTNAME}1" in hosts, hosts
            assert cluster.kill_node(1), "kill_node found no process on node 1"
            driver.stdin.write("dead\n")
            driver.stdin.flush()
            end = _said(driver.stdout)
            driver.wait(timeout=90)
        finally:
            if driver.poll() is None:
                driver.kill()
    print(f"after node 1 was killed: {end}")  # the figures, for -s or -rP
    assert end["outcome"] != "returned", "the call pending on the killed node returned"
    assert end["failed_after"] <= 30, f"the pending call failed {end['failed_after']:.1f} s after its node died"
    assert end["callbacks"] == 1, f"the failure callbacks ran {end['callbacks']} times, not once"
    assert end["callback_after"] is not None and end["callback_after"] <= 30
    assert end["health"] != "returned", "check_health() returned after a node died"
    assert end["shutdown_s"] <= 30, f"shutdown took {end['shutdown_s']:.1f} s after a node died"
