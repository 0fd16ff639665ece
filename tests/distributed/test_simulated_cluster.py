"""A multi-node Ray cluster simulated on one machine
(harness.executors.ray.simulated_cluster, ``python -m harness cluster``): a
driver in the world reaches a real raylet on every node, each node has files of
its own, and nothing is left on the host, after a Ctrl-C of the command as
after ``stop()``. The ``ray`` backend across its nodes (``ExecutorConfig.nodes``):
ranks node by node on machines that share no file system, the process group
holds across them, and a node killed under a pending call fails it within
30 s, runs the failure callbacks once and makes ``check_health()`` raise, with
``shutdown()`` still bounded.

Each test runs in its own forked process (``distributed``) and needs Ray
(``ray``) and root (network namespaces).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import IO

import pytest

from harness.system.nodes import NODE_HOSTNAME, unavailable_reason

pytestmark = [
    pytest.mark.harness_ray,
    pytest.mark.harness_distributed,
    pytest.mark.timeout(420),
    # Each test requires that no process is left in a namespace made after it
    # began: another test's cluster, beside it, would be counted against it.
    pytest.mark.harness_exclusive,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"simulated nodes: {unavailable_reason()}"),
]

# Runs in the world: a task pinned to each node says where it ran and what of
# the files it finds; node 0's task leaves a file that no other machine may see.
WHERE = textwrap.dedent(
    """
    import json, os, sys, ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
    ray.init(log_to_driver=False)
    probe = "/tmp/harness-cluster-probe"
    @ray.remote(num_cpus=1)
    def where(write):
        if write:
            open(probe, "w").close()
        return ray.util.get_node_ip_address(), os.path.exists(probe)
    alive = sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: n["NodeManagerAddress"])
    seen = {}
    for n in alive:
        if n["Resources"].get("CPU"):
            ip = n["NodeManagerAddress"]
            seen[ip] = ray.get(where.options(scheduling_strategy=On(n["NodeID"], soft=False)).remote(ip.endswith(".1")))
    print("said:", json.dumps({"nodes": [[n["NodeManagerAddress"], n["Resources"].get("CPU", 0)] for n in alive],
                      "tasks": seen, "world_sees_probe": os.path.exists(probe)}), flush=True)
    sys.stdin.read()  # until the test is done looking
    """
)


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


def _said(stream: IO[str]) -> str:
    """The driver's next line of its own ("said: ..."): Ray prints into the
    driver's output too (a raylet's death notice, with its log lines), so
    any other line is passed over."""
    passed = []
    for line in stream:
        if line.startswith("said: "):
            return line.removeprefix("said: ").strip()
        passed.append(line)
    return f"(the driver ended without saying it; it printed: {''.join(passed)[-2000:]!r})"


def _sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _host_network() -> list[str]:
    return [
        subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout
        for args in (["-br", "addr"], ["route"], ["-6", "route"])
    ]


def _network_namespaces() -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found.add(os.stat(f"/proc/{entry}/ns/net").st_ino)
            except OSError:
                pass
    return found


def _processes_outside(namespaces: set[int]) -> list[str]:
    """Processes in a network namespace that did not exist before: a node's or the world's."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino in namespaces:
                    continue
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            found.append(f"{entry}: {cmd[:120]}")
    return found


def _settled(check: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return bool(check())  # type: ignore[operator]


def test_the_cluster_command_runs_a_driver_that_reaches_every_node_and_a_ctrl_c_leaves_nothing(
    tmp_path: Path,
) -> None:
    network, namespaces = _host_network(), _network_namespaces()
    script = tmp_path / "where.py"
    script.write_text(WHERE)
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "cluster",
            "--nodes",
            "2",
            "--cpus-per-node",
            "1",
            "--",
            sys.executable,
            str(script),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As a shell's background job has it (CI's runner may be one): SIGINT
        # comes ignored, and a Ctrl-C must stop the command all the same.
        preexec_fn=_sigint_ignored,  # noqa: PLW1509 - one call, before exec
    ) as command:
        assert command.stdout is not None and command.stderr is not None
        try:
            line = _said(command.stdout)
            during = _host_network()
        finally:
            command.send_signal(signal.SIGINT)
            _, said = command.communicate(timeout=60)
    assert line.startswith("{"), f"the driver did not report: {line}; the command said: {said}"
    seen = json.loads(line)
    assert during == network, "the host's addresses or routes changed while the cluster ran"
    assert seen["nodes"] == [["10.213.0.1", 1.0], ["10.213.0.2", 1.0], ["10.213.0.254", 0]], (
        "not a head, one more node and the world's driver-only raylet"
    )
    assert seen["tasks"] == {"10.213.0.1": ["10.213.0.1", True], "10.213.0.2": ["10.213.0.2", False]}, (
        "a task pinned to a node did not run there, or saw another node's /tmp"
    )
    assert not seen["world_sees_probe"], "the world (the caller's machine) sees node 0's /tmp"
    # Interrupted: 2, by the command line's one convention (pytest's; harness/__main__.py).
    assert command.returncode == 2, f"a Ctrl-C of the command exits 2 (interrupted), got {command.returncode}"
    left = _processes_outside(namespaces)
    assert _settled(lambda: not _processes_outside(namespaces), 15), f"left after a Ctrl-C: {left}"
    assert _settled(lambda: _network_namespaces() <= namespaces, 15), "namespaces left after a Ctrl-C"
    assert _host_network() == network


def test_ray_ranks_run_node_by_node_across_nodes_and_a_killed_node_fails_its_call_and_stop_leaves_nothing() -> None:
    from harness.executors.ray.simulated_cluster import SimulatedCluster

    namespaces = _network_namespaces()
    argv = [sys.executable, "-c", DRIVER]
    with (
        SimulatedCluster.start(2, cpus_per_node=2) as cluster,
        cluster.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as driver,
    ):
        assert driver.stdin is not None and driver.stdout is not None
        try:
            seen = json.loads(_said(driver.stdout))
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
            assert json.loads(_said(driver.stdout)) == {"pending": True}
            time.sleep(2)  # the call reached every rank
            # Node 1, not the head (node 0 holds the cluster's GCS): its ranks' machine dies.
            assert f"{NODE_HOSTNAME}1" in hosts, hosts
            assert cluster.kill_node(1), "kill_node found no process on node 1"
            driver.stdin.write("dead\n")
            driver.stdin.flush()
            end = json.loads(_said(driver.stdout))
            driver.wait(timeout=90)
        finally:
            if driver.poll() is None:
                driver.kill()
    print(f"after node 1 was killed: {end}")  # the figures, for -s or -rP
    assert end["outcome"] != "returned", "the call pending on the killed node returned"
    assert "on the node at 10.213.0.2" in end["outcome"], f"the error names no node, or another: {end['outcome']}"
    assert end["failed_after"] <= 30, f"the pending call failed {end['failed_after']:.1f} s after its node died"
    assert end["callbacks"] == 1, f"the failure callbacks ran {end['callbacks']} times, not once"
    assert end["callback_after"] is not None and end["callback_after"] <= 30
    assert end["health"] != "returned", "check_health() returned after a node died"
    assert end["shutdown_s"] <= 30, f"shutdown took {end['shutdown_s']:.1f} s after a node died"
    left = _processes_outside(namespaces)
    assert _settled(lambda: not _processes_outside(namespaces), 15), f"left after stop(): {left}"
    assert _settled(lambda: _network_namespaces() <= namespaces, 15), "namespaces left after stop()"
