"""The ``ray`` and ``ray-graph`` backends' own promises, beyond the portable
suite: who starts and stops the cluster, actors killed through Ray, a dead
caller with a local cluster; ``ray``'s own channels; ``ray-graph``'s compiled
graph (what Ray leaves behind, reads that time out).

Each test runs in its own forked process (``distributed``) and needs Ray (``ray``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness import ExecutorConfig, WorkerDiedError
from harness.conformance import probes
from harness.conformance._checks import process_gone, wait_until
from harness.system import leaks

pytestmark = [pytest.mark.harness_ray, pytest.mark.harness_distributed, pytest.mark.timeout(240)]


def _ray_processes() -> list[str]:
    """Ray's daemons among this process's descendants."""
    names = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "gcs_server" in cmd or "raylet" in cmd or "ray::" in cmd or "ray/_private" in cmd:
            names.append(f"{child.pid}: {cmd[:100]}")
    return names


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """No cluster named: the executor starts its own."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A running single-node cluster, named by RAY_ADDRESS."""
    from harness.executors.ray import local_cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("HARNESS_RAY_SESSION_CLUSTER", raising=False)
    with local_cluster(num_cpus=8) as env:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        yield env["RAY_ADDRESS"]


def test_a_cluster_it_started_is_gone_after_shutdown(no_cluster: None) -> None:
    from harness.executors.ray import create

    before = leaks.baseline()
    ex = create(ExecutorConfig(2))
    assert ex.collective_rpc(probes.rank) == [0, 1]
    assert _ray_processes(), "expected the executor to have started a local Ray cluster"
    ex.shutdown()
    assert wait_until(lambda: not _ray_processes(), 15), f"Ray processes left: {_ray_processes()}"
    problems = leaks.wait_clean(before, timeout=10, fd_slack=4)
    # Ray's driver keeps a few descriptors across ray.init/ray.shutdown (its log
    # file, gRPC's pollers): only processes, threads and sockets are checked here.
    assert not [p for p in problems if not p.startswith("file descriptors")], problems


def test_it_connects_to_the_cluster_it_started_not_the_newest_on_the_machine(
    no_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Several runs on one machine start clusters at once (CI's parallel jobs,
    # pytest-xdist's workers): Ray's "auto" address picks the newest it finds.
    import ray

    from harness.executors.ray import create
    from harness.executors.ray.cluster import LocalCluster

    start = LocalCluster.start.__func__  # type: ignore[attr-defined]
    others: list[LocalCluster] = []

    def start_then_another(cls: type[LocalCluster], num_cpus: int, *args: Any, **kwargs: Any) -> LocalCluster:
        ours: LocalCluster = start(cls, num_cpus, *args, **kwargs)
        others.append(start(cls, 1))  # newer, another run's
        return ours

    monkeypatch.setattr(LocalCluster, "start", classmethod(start_then_another))
    try:
        ex = create(ExecutorConfig(1))
        try:
            from harness.executors.ray.executor import _RUNTIME

            assert _RUNTIME.cluster is not None
            ours, connected = _RUNTIME.cluster.address, ray.get_runtime_context().gcs_address
            # By port: Ray names its GCS by the node's address, whichever the
            # caller dialled (127.0.0.1 here); one machine, one port each.
            assert connected.rpartition(":")[2] == ours.rpartition(":")[2], (
                f"connected to the cluster at {connected}, another run's, not its own at {ours}"
            )
        finally:
            ex.shutdown()
    finally:
        for other in others:
            other.stop()


def test_a_cluster_it_connected_to_keeps_running_after_shutdown(cluster: str) -> None:
    import ray

    from harness.executors.ray import create

    ex = create(ExecutorConfig(2))
    pids = [int(p) for p in ex.collective_rpc(probes.pid)]
    ex.shutdown()
    assert not ray.is_initialized(), "the executor connected, so it must disconnect on shutdown"
    assert wait_until(lambda: all(process_gone(p) for p in pids), 10), f"actors {pids} outlived shutdown"
    # The cluster is still there: a new executor connects to it and works.
    with create(ExecutorConfig(2)) as again:
        assert again.collective_rpc(probes.rank) == [0, 1]


def test_after_an_executor_with_a_cluster_of_its_own_one_connects_to_a_named_cluster_with_its_token(
    no_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What harness bench does for ray: start-up with no cluster, then with the
    # run-wide session's. Ray had read the first cluster's token settings and
    # kept them: "Failed to connect to Ray cluster" (issue: bench mp,ray).
    from harness.executors.ray import SESSION_CLUSTER_ENV, create, local_cluster
    from harness.system.environ import environ

    monkeypatch.delenv(SESSION_CLUSTER_ENV, raising=False)
    with create(ExecutorConfig(world_size=1)) as ex:
        assert ex.collective_rpc(probes.rank) == [0]
    with local_cluster(num_cpus=2) as env, environ(env), create(ExecutorConfig(world_size=1)) as ex:
        assert ex.collective_rpc(probes.rank) == [0]


def test_ray_initialised_by_the_caller_is_left_initialised(cluster: str) -> None:
    import ray

    from harness.executors.ray import create

    ray.init(address=cluster, log_to_driver=False, configure_logging=False)
    try:
        with create(ExecutorConfig(2)) as ex:
            assert ex.collective_rpc(probes.rank) == [0, 1]
        assert ray.is_initialized(), "shutdown() disconnected a Ray the caller had initialised"
    finally:
        ray.shutdown()


def test_non_block_returns_one_future_of_the_list(cluster: str) -> None:
    from harness.executors.ray import create

    with create(ExecutorConfig(2)) as ex:
        future = ex.collective_rpc(probes.rank, non_block=True)
        assert isinstance(future, concurrent.futures.Future), f"got {type(future).__name__}"
        assert future.result(timeout=60) == [0, 1]


def test_a_timeout_is_the_builtin_timeout_error_and_the_executor_goes_on(cluster: str) -> None:
    from harness.executors.ray import create

    with create(ExecutorConfig(2)) as ex:
        start = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            ex.collective_rpc(probes.sleep, args=(3.0,), timeout=0.5)
        assert time.monotonic() - start < 2.5
        assert "ray" not in type(info.value).__module__, f"raised Ray's own {type(info.value)!r}"
        assert ex.collective_rpc(probes.echo_value, args=("after",)) == ["after", "after"]


@pytest.mark.parametrize("factory", ["create", "create_graph"])
def test_an_actor_killed_through_ray_fails_pending_and_later_calls(cluster: str, factory: str) -> None:
    import ray

    import harness.executors.ray as backends
    from harness.executors.ray.executor import _Group as _RayGroup

    calls: list[int] = []
    with getattr(backends, factory)(ExecutorConfig(2)) as ex:
        ex.register_failure_callback(lambda: calls.append(1))
        pending = ex.collective_rpc(probes.sleep, args=(60.0,), non_block=True)
        time.sleep(0.3)
        group = ex._group
        assert isinstance(group, _RayGroup), type(group)
        ray.kill(group.actors[1])  # as an operator or Ray itself would
        start = time.monotonic()
        with pytest.raises(WorkerDiedError) as info:
            pending.result(timeout=30)
        assert time.monotonic() - start <= 10
        assert info.value.rank == 1
        with pytest.raises(WorkerDiedError):
            ex.collective_rpc(probes.rank)
        with pytest.raises(WorkerDiedError):
            ex.check_health()
        assert wait_until(lambda: len(calls) >= 1, 10)
    time.sleep(0.5)
    assert calls == [1], f"the failure callback ran {len(calls)} times"


def test_a_death_with_no_call_in_flight_runs_the_callbacks(cluster: str) -> None:
    from harness.executors.ray import create

    calls: list[str] = []
    done = threading.Event()

    def on_failure() -> None:
        calls.append(threading.current_thread().name)
        done.set()

    with create(ExecutorConfig(2)) as ex:
        ex.register_failure_callback(on_failure)
        pid = ex.worker_pids[0]
        assert pid is not None, "rank 0's actor runs on this host: its pid is in sight"
        os.kill(pid, signal.SIGKILL)
        assert done.wait(10), "no failure callback within 10 s of an idle actor's death"
        with pytest.raises(WorkerDiedError):
            ex.check_health()
    assert len(calls) == 1


def _channel_semaphores() -> set[str]:
    return {n for n in os.listdir(leaks.SHM_DIR) if n.startswith(("sem.hdr", "sem.obj"))}


def test_ray_runs_calls_through_its_own_rings_and_ray_graph_through_a_compiled_graph(cluster: str) -> None:
    from ray.dag.compiled_dag_node import CompiledDAG

    from harness.executors.ray import create, create_graph
    from harness.executors.ray.channels import CallerChannels

    with create(ExecutorConfig(2)) as ours, create_graph(ExecutorConfig(2)) as graph:
        transport = getattr(ours._group, "transport", None)
        assert isinstance(transport, CallerChannels), "ray: its calls do not go through ray.channels"
        assert transport.ring is not None and transport.local_ranks == [0, 1], "ray: no shared-memory ring"
        assert transport.listener is None and not transport.sockets, "ray on one node: a socket for its calls"
        assert getattr(ours._group, "dag", None) is None, "ray: a compiled graph"
        assert isinstance(getattr(graph._group, "dag", None), CompiledDAG), "ray-graph: no compiled graph"
        assert graph.collective_rpc(probes.rank) == ours.collective_rpc(probes.rank) == [0, 1]


def test_a_graph_leaves_no_channel_semaphores_while_its_caller_stays_connected(cluster: str) -> None:
    # Ray's raylet makes a pair for every channel and removes them only when the
    # driver disconnects: a caller that keeps Ray (its own ray.init, another
    # executor) would gather every graph's (C9, C10).
    import ray

    from harness.executors.ray import create_graph as create

    ray.init(address=cluster, log_to_driver=False, configure_logging=False)
    try:
        before = _channel_semaphores()
        ex = create(ExecutorConfig(2))
        made = _channel_semaphores() - before
        assert made, "expected the graph's channels to have named semaphores in /dev/shm"
        assert ex.collective_rpc(probes.make_payload, args=(1 << 20, 0), unique_reply_rank=1) is not None
        ex.shutdown()
        assert ray.is_initialized(), "the caller's own Ray connection was closed"
        assert not (_channel_semaphores() & made), f"left: {sorted(_channel_semaphores() & made)}"
    finally:
        ray.shutdown()


def _descriptors_but_sockets() -> list[str]:
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if not target.startswith("socket:"):
                targets.append(target)
    return sorted(targets)


def test_create_shutdown_cycles_of_the_graph_leak_nothing_but_rays_declared_sockets(cluster: str) -> None:
    # What C10 checks, less the descriptors `ray-graph` declares (create_graph.unsupported["C10"]):
    # Ray's compiled graphs leave closed TCP sockets in the caller.
    from harness.executors.ray import create_graph as create

    def cycle() -> None:
        with create(ExecutorConfig(2)) as ex:
            assert ex.collective_rpc(probes.rank) == [0, 1]

    cycle()  # what a first start keeps for good (Ray's driver) is not a leak
    before = leaks.baseline()
    files = _descriptors_but_sockets()
    for _ in range(5):
        cycle()
    problems = leaks.wait_clean(before, timeout=10, fd_slack=None)
    assert not problems, problems
    now = _descriptors_but_sockets()
    assert len(now) <= len(files), f"descriptors other than sockets grew: new {sorted(set(now) - set(files))}"


def test_a_timed_result_that_expires_while_one_rank_has_replied_loses_no_reply(cluster: str) -> None:
    # Ray's own timed read of several output channels drops those it had read
    # when it expires: rank 0's reply is in, rank 1's is not, three times over.
    from harness.executors.ray import create_graph as create

    with create(ExecutorConfig(2)) as ex:
        future = ex.collective_rpc(probes.sleep_on_rank_then, args=(1, 1.5, "v"), non_block=True)
        for _ in range(3):
            with pytest.raises(TimeoutError):
                future.result(timeout=0.2)
        assert future.result(timeout=60) == ["v", "v"]
        assert ex.collective_rpc(probes.rank) == [0, 1]


@pytest.mark.parametrize("factory", ["create", "create_graph"])
def test_a_caller_waiting_on_a_long_call_leaves_the_cpu_to_others(cluster: str, factory: str) -> None:
    """Ray's channel read spins until its timeout (99 % of a core over a 3 s
    call, measured): the graph's caller polls instead, after a short spin;
    ``ray``'s sleeps on its pipes, as mp's."""
    import harness.executors.ray as backends

    with getattr(backends, factory)(ExecutorConfig(2)) as ex:
        ex.collective_rpc(probes.rank)
        wall, cpu = time.monotonic(), time.process_time()
        assert ex.collective_rpc(probes.sleep, args=(3.0,)) == [0, 1]
        share = (time.process_time() - cpu) / (time.monotonic() - wall)
        assert share < 0.5, f"the caller burnt {share:.0%} of a core waiting on a 3 s call"


def test_a_placement_group_that_cannot_fit_fails_start_up_in_time(cluster: str) -> None:
    from harness import WorkerInitError
    from harness.executors.ray import create

    start = time.monotonic()
    with pytest.raises(WorkerInitError, match="could not be placed"):
        create(ExecutorConfig(64, init_timeout_s=3.0))
    assert time.monotonic() - start < 15


def test_workers_of_a_sigkilled_caller_exit_with_its_local_cluster(no_cluster: None, tmp_path: Path) -> None:
    """C13 with the cluster the caller started (the suite's C13 uses a shared one)."""
    pid_file = tmp_path / "pids.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("RAY_ADDRESS", None)
    driver = subprocess.Popen(
        [sys.executable, "-m", "harness.conformance._orphan_driver", "ray", "2", "spawn", str(pid_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: pid_file.exists() or driver.poll() is not None, 120), "driver did not start"
        assert pid_file.exists(), f"the driver exited with {driver.poll()} before starting its workers"
        workers = json.loads(pid_file.read_text())
        cluster = [c.pid for c in psutil.Process(driver.pid).children(recursive=True) if c.pid not in workers]
    finally:
        driver.kill()
        driver.wait(30)
    everything: list[Any] = workers + cluster
    wait_until(lambda: all(process_gone(p) for p in everything), 10)
    alive = [p for p in everything if not process_gone(p)]
    for p in alive:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not alive, f"processes {alive} (workers {workers}, cluster {cluster}) outlived the caller by 10 s"
    # The graph's channel semaphores, named after the raylet, which Ray removes
    # only when the driver disconnects: the keeper removes them with the cluster.
    left = [n for n in os.listdir("/dev/shm") if any(n.startswith((f"sem.hdr{p}-", f"sem.obj{p}-")) for p in cluster)]
    assert not left, f"the graph's semaphores {left} outlived the caller and its cluster"


@pytest.mark.parametrize("factory", ["create", "create_graph"])
def test_a_result_the_caller_cannot_unpickle_fails_that_call_only(cluster: str, factory: str) -> None:
    import harness.executors.ray as backends
    from harness import RemoteCallError

    with getattr(backends, factory)(ExecutorConfig(2)) as ex:
        with pytest.raises(RemoteCallError, match="could not be unpickled in the caller"):
            ex.collective_rpc(probes.result_the_caller_cannot_unpickle)
        assert ex.collective_rpc(probes.rank) == [0, 1]


def test_a_keeper_told_to_stop_stops_its_cluster_first() -> None:
    from harness.executors.ray.cluster import LocalCluster

    cluster = LocalCluster.start(num_cpus=2)
    members: list[int] = []
    try:
        members = [c.pid for c in psutil.Process(cluster.keeper.pid).children(recursive=True)]
        assert members, "the keeper started no cluster processes"
        os.kill(cluster.keeper.pid, signal.SIGTERM)
        assert wait_until(lambda: all(process_gone(p) for p in members), 15), (
            f"cluster processes {[p for p in members if not process_gone(p)]} outlived their keeper's SIGTERM"
        )
        cluster.keeper.wait(15)  # it removes the folder last
        assert not os.path.exists(cluster.temp_dir), f"the cluster's folder {cluster.temp_dir} was left behind"
    finally:
        cluster.stop()
        for pid in members:  # what a failed check left: not the next test's problem
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_cluster_started_with_custom_resources_declares_them() -> None:
    """vllm-ray's cluster: the custom resource of the suite's vLLM platform plugin."""
    from harness.executors.ray.cluster import LocalCluster

    cluster = LocalCluster.start(num_cpus=1, resources={"harness_test_device": 3.0})
    try:
        log = Path(cluster.temp_dir, "ray-start-1.log").read_text()
        assert '--resources={"harness_test_device": 3.0}' in " ".join(
            psutil.Process(cluster.keeper.pid).children()[0].cmdline()
        ), log
    finally:
        cluster.stop()


_KEEPER_ON_PORTS = """
import sys
from harness.executors.ray import cluster
cluster._candidate_ports = lambda: [int(sys.argv[2]), cluster._gcs_port()]
cluster._keep(int(sys.argv[1]), "1", "")
"""


def test_a_start_whose_port_was_taken_is_tried_again_on_another_port() -> None:
    # Another process holds the first port the keeper tries, as when one took it
    # between the keeper choosing it and Ray's GCS binding it.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        death_r, death_w = os.pipe()
        keeper = subprocess.Popen(
            [sys.executable, "-c", _KEEPER_ON_PORTS, str(death_r), str(taken_port)],
            stdout=subprocess.PIPE,
            pass_fds=(death_r,),
            start_new_session=True,
        )
        os.close(death_r)
        try:
            assert keeper.stdout is not None
            line = keeper.stdout.readline().decode().strip()
            kind, _, rest = line.partition(" ")
            assert kind == "ready", f"the keeper did not start a cluster after its port was taken: {line!r}"
            address, _, temp_dir = rest.partition(" ")
            assert address != f"127.0.0.1:{taken_port}", f"the cluster says it runs on the taken port: {address}"
            with open(os.path.join(temp_dir, "ray-start-1.log"), encoding="utf-8", errors="replace") as f:
                first = f.read()
            assert str(taken_port) in first, f"the first start did not try port {taken_port}: {first[-500:]}"
        finally:
            os.close(death_w)
            try:
                keeper.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(keeper.pid, signal.SIGKILL)
                keeper.wait(5)
            if keeper.stdout is not None:
                keeper.stdout.close()


_FRESH_MACHINE_DRIVER = """
import os, stat, subprocess, sys
from harness import ExecutorConfig, WorkerInitError
from harness.conformance import probes
from harness.executors.ray import create, local_cluster

def in_child(code, env):
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout[-2000:]} {done.stderr[-3000:]}"
    return done.stdout

# 1. The run-wide session cluster: drivers connect with the environment it hands out.
with local_cluster(num_cpus=4) as env:
    token = env["RAY_AUTH_TOKEN_PATH"]
    mode = stat.S_IMODE(os.stat(token).st_mode)
    assert mode == 0o600, f"token file {token} has mode {mode:o}"
    assert not token.startswith(os.environ["HOME"]), f"token {token} written under HOME"
    out = in_child(
        "from harness import ExecutorConfig; from harness.conformance import probes\\n"
        "from harness.executors.ray import create\\n"
        "with create(ExecutorConfig(2)) as ex: print(ex.collective_rpc(probes.rank))",
        dict(os.environ, **env),
    )
    assert out.strip() == "[0, 1]", out
    # Authentication is on: a driver without the token is refused, told how to give one.
    no_token = dict(os.environ, RAY_ADDRESS=env["RAY_ADDRESS"], RAY_AUTH_MODE="token")
    out = in_child(
        "from harness import ExecutorConfig, WorkerInitError\\n"
        "from harness.executors.ray import create\\n"
        "try: create(ExecutorConfig(1, init_timeout_s=20))\\n"
        "except WorkerInitError as e: print(e)\\n"
        "else: print('CONNECTED')",
        no_token,
    )
    assert "CONNECTED" not in out and "RAY_AUTH_TOKEN" in out, f"a driver without the token got: {out}"
assert not os.path.exists(token), f"the token {token} outlived its cluster"

# 2. An executor that starts its own cluster, in this process.
with create(ExecutorConfig(2)) as ex:
    assert ex.collective_rpc(probes.rank) == [0, 1]
left = {k: v for k, v in os.environ.items() if k.startswith("RAY_AUTH")}
assert not left, f"the executor left {left} in its caller's environment"
print("FRESH-OK")
"""


def test_a_fresh_machine_needs_no_ray_state_in_home(tmp_path: Path) -> None:
    """No ~/.ray/, no RAY_AUTH_* variables: both the run-wide session cluster and an
    executor's own cluster make their own token, and HOME stays untouched."""
    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(_FRESH_MACHINE_DRIVER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.pop("HARNESS_RAY_SESSION_CLUSTER", None)
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run(
        [sys.executable, str(script)], check=False, env=env, capture_output=True, text=True, timeout=200
    )
    assert done.returncode == 0 and "FRESH-OK" in done.stdout, (
        f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    assert not list(home.rglob("*auth_token*")), f"a token was written under HOME: {list(home.rglob('*'))}"
