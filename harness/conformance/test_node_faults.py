"""C8 across nodes: a whole node failing, all its processes killed at once or
its network cut, fails every pending and later call within 30 s.

Only a multi-node variant has a node to lose apart from the caller's machine;
the others read not applicable. The node is found from the last rank's process
(``_workers``), so the checks need a machine whose nodes are in sight: the
simulated ones (a real cluster's nodes are not the suite's to kill: not run).
Each test runs alone (``exclusive``): a node lost under other tests' executors
would fail them; the run brings the node back before the next test.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.conformance import probes
from harness.conformance._checks import bounded, error_of, not_applicable, one_future, wait_until
from harness.conformance._faults import expect_failure
from harness.conformance._markers import names_in
from harness.conformance._workers import worker_pids
from harness.conformance.spec_bounds import bounded_by_spec, judge, raised_within, stretched, wait_within, waited
from harness.system.nodes import cut_machine, kill_machine
from harness.system.pids import pid_namespace

pytestmark = [pytest.mark.timeout(300), pytest.mark.harness_exclusive]

#: SPEC.md's C8 bound for a whole node: longer than a worker's 10 s, as a
#: cluster tells a lost machine by missed heartbeats.
NODE_BOUND_S = 30.0
FAILURES: dict[str, Callable[[int], list[Any]]] = {"killed": kill_machine, "cut_off": cut_machine}


@pytest.mark.harness_clause("C8")
@pytest.mark.parametrize("failure", list(FAILURES))
def test_c8_a_node_failing_fails_pending_and_later_calls_within_30_s_and_runs_the_callbacks_once(
    executor: Any, executor_config: Any, world_size: int, tmp_path: Path, failure: str
) -> None:
    if executor_config.nodes < 2:
        not_applicable("the ranks run on one machine: no node of theirs can fail apart from the caller's")
    rank = world_size - 1  # on the last node
    pids = worker_pids(executor)
    pid = pids[rank]
    if os.stat(f"/proc/{pid}/ns/pid").st_ino == pid_namespace():
        not_applicable(f"rank {rank} runs on the caller's machine: its node cannot fail apart from the caller")
    runs: list[float] = []
    lock = threading.Lock()

    def ran() -> None:
        with lock:
            runs.append(time.monotonic())

    bounded(lambda: executor.register_failure_callback(ran), 10, "register_failure_callback()")
    markers = tmp_path / "started"
    pending = one_future(
        executor.collective_rpc(probes.sleep_marked, args=(str(markers), 600.0), non_block=True),
        "collective_rpc(non_block=True)",
    )
    started = wait_until(lambda: len(names_in(markers, pids)) == world_size, 60)
    assert started, f"the call did not start on every rank within 60 s: {sorted(names_in(markers, pids))}"
    lost = FAILURES[failure](pid)
    died = time.monotonic()
    what = f"the call pending on rank {rank} when its node was {failure}"
    error = error_of(pending, stretched(NODE_BOUND_S) + 5, what)
    failed_after = time.monotonic() - died
    expect_failure(error, f"the call pending when rank {rank}'s node was {failure} ({lost})")
    assert failed_after <= stretched(NODE_BOUND_S), (
        f"the call pending on rank {rank} failed {failed_after:.1f} s after its node was {failure}, "
        f"more than {NODE_BOUND_S:g} s{waited(NODE_BOUND_S)}"
    )
    judge(failed_after, NODE_BOUND_S, f"the pending call's failure after its node was {failure}")
    later = raised_within(lambda: executor.collective_rpc(probes.rank), NODE_BOUND_S, "a call after the node failed")
    expect_failure(later, f"a call after rank {rank}'s node was {failure}")
    health = raised_within(executor.check_health, NODE_BOUND_S, "check_health() after the node failed")
    assert health is not None, f"check_health() returned after rank {rank}'s node was {failure}, expected it to raise"
    assert wait_within(lambda: bool(runs), NODE_BOUND_S, f"the failure callback after the node was {failure}", died), (
        f"no failure callback ran within {NODE_BOUND_S:g} s of rank {rank}'s node being {failure}{waited(NODE_BOUND_S)}"
    )
    time.sleep(0.5)  # a second run, late, shows by now
    assert len(runs) == 1, f"the failure callback ran {len(runs)} times after one node was {failure}, expected once"
    bounded_by_spec(executor.shutdown, NODE_BOUND_S, f"shutdown() after rank {rank}'s node was {failure}")
