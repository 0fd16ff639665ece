"""A multi-node Ray cluster simulated on one machine
(harness.executors.ray.simulated_cluster, ``python -m harness cluster``): a
driver in the world reaches a real raylet on every node, each node has files of
its own, a killed node fails the calls pending on it, and nothing is left on
the host, after a Ctrl-C of the command as after ``stop()``.

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

from harness.system.nodes import unavailable_reason

pytestmark = [
    pytest.mark.ray,
    pytest.mark.distributed,
    pytest.mark.timeout(300),
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

# Runs in the world: an actor on node 1 starts a long call; the test kills node
# 1; the driver says how the call ended and how long after "pending" it did.
PENDING = textwrap.dedent(
    """
    import os, time, ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
    ray.init(log_to_driver=False)
    node = next(n for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"].endswith(".2"))
    @ray.remote(num_cpus=1)
    class Sleeper:
        def ping(self):
            return ray.util.get_node_ip_address()
        def sleep(self):
            time.sleep(600)
    actor = Sleeper.options(scheduling_strategy=On(node["NodeID"], soft=False)).remote()
    print("said: on", ray.get(actor.ping.remote()), flush=True)
    call = actor.sleep.remote()
    print("said: pending", flush=True)
    start = time.monotonic()
    try:
        ray.get(call, timeout=120)
        print("said: returned", flush=True)
    except Exception as exc:
        print("said: failed", type(exc).__name__, round(time.monotonic() - start, 1), flush=True)
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
    assert command.returncode == 130, f"a Ctrl-C of the command exits 130, got {command.returncode}"
    left = _processes_outside(namespaces)
    assert _settled(lambda: not _processes_outside(namespaces), 15), f"left after a Ctrl-C: {left}"
    assert _settled(lambda: _network_namespaces() <= namespaces, 15), "namespaces left after a Ctrl-C"
    assert _host_network() == network


def test_a_killed_node_fails_the_call_pending_on_it_within_30_s_and_stop_leaves_nothing(tmp_path: Path) -> None:
    from harness.executors.ray.simulated_cluster import SimulatedCluster

    namespaces = _network_namespaces()
    with SimulatedCluster.start(2, cpus_per_node=1) as cluster:
        driver = cluster.popen([sys.executable, "-c", PENDING], stdout=subprocess.PIPE, text=True)
        assert driver.stdout is not None
        assert _said(driver.stdout).split() == ["on", "10.213.0.2"]
        assert _said(driver.stdout) == "pending"
        time.sleep(1)  # the call reached the actor
        killed = cluster.kill_node(1)
        assert killed, "kill_node found no process on node 1"
        outcome = _said(driver.stdout).split()
        driver.wait(timeout=60)
    assert outcome[:1] == ["failed"], f"the call on the killed node did not fail: {outcome}"
    assert outcome[1] in {"ActorDiedError", "ActorUnavailableError", "RayActorError"}, outcome
    assert float(outcome[2]) <= 30, f"the call failed {outcome[2]} s after its node was killed: over 30 s"
    left = _processes_outside(namespaces)
    assert _settled(lambda: not _processes_outside(namespaces), 15), f"left after stop(): {left}"
    assert _settled(lambda: _network_namespaces() <= namespaces, 15), "namespaces left after stop()"
