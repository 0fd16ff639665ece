"""Simulated nodes (harness.system.nodes): nodes reach each other through a
private bridge, never the host's network; each has its own /tmp and /dev/shm;
a node can be killed or cut off; nothing is left after close() or after the
owner is SIGKILLed, and the host's namespace is never touched."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.system.nodes import Nodes, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"simulated nodes: {unavailable_reason()}")

LISTEN = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket()
    s.bind((sys.argv[1], 7000))
    s.listen()
    print("listening", flush=True)
    conn, _ = s.accept()
    conn.sendall(b"hello from " + sys.argv[1].encode())
    """
)
CONNECT = textwrap.dedent(
    """
    import socket, sys
    try:
        with socket.create_connection((sys.argv[1], 7000), timeout=5) as c:
            print(c.recv(100).decode())
    except OSError as exc:
        print(f"error {exc.errno}")
    """
)


def _host_network() -> list[str]:
    """What the host's namespace holds: links, addresses, routes (v4 and v6)."""
    out = []
    for args in (["-br", "link"], ["-br", "addr"], ["route"], ["-6", "route"]):
        out.append(subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout)
    return out


def _network_namespaces() -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found.add(os.stat(f"/proc/{entry}/ns/net").st_ino)
            except OSError:
                pass
    return found


def _in_pid_namespace(init: int) -> set[int]:
    ns = os.stat(f"/proc/{init}/ns/pid").st_ino
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/pid").st_ino == ns:
                    found.add(int(entry))
            except OSError:
                pass
    return found


def _gone_within(check: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def nodes() -> Iterator[Nodes]:
    with Nodes(2) as made:
        yield made


def test_the_hosts_network_is_the_same_before_during_and_after(tmp_path: Path) -> None:
    before = _host_network()
    with Nodes(2):
        during = _host_network()
    assert during == before, "a link, address or route appeared in the host's namespace while the nodes ran"
    assert _host_network() == before


def test_nodes_reach_each_other_and_the_world_through_the_bridge(nodes: Nodes) -> None:
    listener = nodes.popen(1, [sys.executable, "-c", LISTEN, nodes.nodes[1].address], stdout=subprocess.PIPE)
    assert listener.stdout is not None and listener.stdout.readline().strip() == b"listening"
    got = nodes.run(0, [sys.executable, "-c", CONNECT, nodes.nodes[1].address])
    assert got.stdout.strip() == f"hello from {nodes.nodes[1].address}", got
    ping = nodes.run(None, ["ip", "-br", "addr", "show", "br0"])
    assert nodes.world_address in ping.stdout


def test_a_node_cannot_reach_the_hosts_addresses(nodes: Nodes) -> None:
    """No route leads out of the world: the host's own address is unreachable
    from a node (refused before any packet leaves)."""
    host = subprocess.run(["ip", "-4", "-br", "addr"], capture_output=True, text=True, check=True).stdout
    addresses = [f.split("/")[0] for line in host.splitlines() for f in line.split()[2:] if "/" in f]
    outside = [a for a in addresses if not a.startswith("127.")]
    if not outside:
        pytest.skip("the host has no address beyond loopback to try")
    got = nodes.run(0, [sys.executable, "-c", CONNECT, outside[0]])
    assert got.stdout.strip() == "error 101", f"node 0 reached the host's {outside[0]}: {got}"  # ENETUNREACH


def test_each_node_has_a_tmp_and_dev_shm_of_its_own(nodes: Nodes) -> None:
    for folder in ("/tmp", "/dev/shm"):
        name = f"{folder}/harness-netns-probe-{os.getpid()}"
        assert nodes.run(0, ["sh", "-c", f"echo node0 > {name}"]).returncode == 0
        assert nodes.run(0, ["cat", name]).stdout.strip() == "node0"
        assert nodes.run(1, ["test", "-e", name]).returncode == 1, f"node 1 sees node 0's {name}"
        assert not os.path.exists(name), f"the host sees node 0's {name}"


def test_each_node_and_the_world_have_a_host_name_of_their_own(nodes: Nodes) -> None:
    names = [nodes.run(where, ["hostname"]).stdout.strip() for where in (0, 1, None)]
    assert names == ["harness-node-0", "harness-node-1", "harness-world"]
    assert socket.gethostname() not in names


def test_a_command_runs_in_the_callers_folder_where_the_machine_has_it(nodes: Nodes, tmp_path: Path) -> None:
    here = os.getcwd()
    assert nodes.run(None, ["pwd"]).stdout.strip() == here
    assert nodes.run(0, ["pwd"]).stdout.strip() == here
    assert nodes.run(None, ["pwd"], cwd=str(tmp_path)).stdout.strip() == str(tmp_path), "the world has the host's /tmp"
    assert nodes.run(0, ["pwd"], cwd=str(tmp_path)).stdout.strip() == "/", "a node has a /tmp of its own"


def test_a_killed_node_loses_every_process_and_stays_empty(nodes: Nodes) -> None:
    sleeper = nodes.popen(0, ["sleep", "600"])
    other = nodes.popen(1, ["sleep", "600"])
    killed = nodes.kill_node(0)
    assert killed, "kill_node found no process in node 0"
    assert sleeper.wait(timeout=10) == -signal.SIGKILL or sleeper.returncode != 0
    assert other.poll() is None, "killing node 0 killed a process of node 1"
    assert nodes.nodes[0].holder.poll() is None, "the node itself (its namespaces) went with its processes"


def test_a_cut_node_is_unreachable_until_connected_again(nodes: Nodes) -> None:
    nodes.cut(1)
    unreachable = nodes.run(0, [sys.executable, "-c", CONNECT, nodes.nodes[1].address])
    assert unreachable.stdout.strip().startswith("error"), unreachable
    nodes.cut(1, connected=True)
    listener = nodes.popen(1, [sys.executable, "-c", LISTEN, nodes.nodes[1].address], stdout=subprocess.PIPE)
    assert listener.stdout is not None and listener.stdout.readline().strip() == b"listening"
    got = nodes.run(0, [sys.executable, "-c", CONNECT, nodes.nodes[1].address])
    assert got.stdout.strip().startswith("hello"), got


def test_close_leaves_no_namespace_or_process() -> None:
    before = _network_namespaces()
    made = Nodes(3)
    sleeper = made.popen(2, ["sleep", "600"])
    assert len(_network_namespaces() - before) == 4, "a world and three nodes"
    made.close()
    made.close()  # idempotent
    assert _gone_within(lambda: _network_namespaces() <= before, 10), "namespaces left after close()"
    assert sleeper.poll() is not None


# A daemon as Ray's raylets are: a new session, its parent gone, SIGHUP ignored.
DAEMON = "setsid sh -c 'trap \"\" HUP; exec sleep 600' </dev/null >/dev/null 2>&1 & echo $!"


def _host_pid_of_daemon(nodes: Nodes, node: int | None) -> int:
    """Start DAEMON in ``node`` (None: the world); its pid as the host sees it."""
    assert nodes.run(node, ["sh", "-c", DAEMON]).returncode == 0
    init = nodes.world_pid if node is None else nodes.nodes[node].pid
    ns = os.stat(f"/proc/{init}/ns/pid").st_ino
    for _ in range(100):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    same = os.stat(f"/proc/{entry}/ns/pid").st_ino == ns
                    cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                if same and cmd == b"sleep\x00600\x00":
                    return int(entry)
        time.sleep(0.05)
    raise AssertionError(f"the daemon started in node {node} was not found")


def test_each_node_and_the_world_see_their_own_processes_only(nodes: Nodes) -> None:
    """As machines: Ray finds its node's raylet among the processes it sees."""
    nodes.popen(1, ["sleep", "600"])
    for where in (0, None):
        seen = nodes.run(where, ["sh", "-c", "echo $$; ls /proc | grep -c '^[0-9]'"]).stdout.split()
        assert int(seen[0]) < 10, f"a process in {where or 'the world'} has the host's pid {seen[0]}"
        assert int(seen[1]) < 10, f"{where or 'the world'} sees {seen[1]} processes: more than its own"


def test_the_nodes_go_when_their_owner_is_sigkilled(tmp_path: Path) -> None:
    """A Ctrl-C or a SIGKILL of the run takes its nodes with it: no namespace,
    no process of a node, not even a daemon that left its parent, is left."""
    before = _network_namespaces()
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from harness.system.nodes import Nodes; import sys, time\n"
            "n = Nodes(2); n.popen(1, ['sleep', '600'])\n"
            f"n.run(0, ['sh', '-c', {DAEMON!r}]); n.run(None, ['sh', '-c', {DAEMON!r}])\n"
            "print(' '.join(str(x.pid) for x in n.nodes), n.world_pid, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
    )
    assert owner.stdout is not None
    inits = [int(p) for p in owner.stdout.readline().split()]
    assert len(inits) == 3
    in_namespaces = {p for init in inits for p in _in_pid_namespace(init)}
    assert len(in_namespaces) >= 6, f"three inits, a sleeper and two daemons: found {sorted(in_namespaces)}"
    owner.kill()
    owner.wait()
    owner.stdout.close()
    assert _gone_within(lambda: not any(os.path.exists(f"/proc/{p}") for p in in_namespaces), 10), (
        "a process of a node or of the world outlived the owner"
    )
    assert _gone_within(lambda: _network_namespaces() <= before, 10), "namespaces outlived their owner"


def test_close_takes_daemons_that_left_their_parent() -> None:
    made = Nodes(1)
    daemons = [_host_pid_of_daemon(made, 0), _host_pid_of_daemon(made, None)]
    made.close()
    assert _gone_within(lambda: not any(os.path.exists(f"/proc/{p}") for p in daemons), 10), daemons


def test_bad_counts_and_nodes_are_named() -> None:
    with pytest.raises(ValueError, match=re.escape("count must be 1..253, got 0")):
        Nodes(0)
    with Nodes(1) as made, pytest.raises(ValueError, match=re.escape("no node 3: there are 1")):
        made.command(3, ["true"])
