"""A caller process for C13: builds an executor, brings it to a state, reports its
worker pids, then waits to be killed.

Run as ``python -m harness.conformance._orphan_driver BACKEND WORLD_SIZE START_METHOD PID_FILE STATE [NODES]``.
The workers' pids go to ``PID_FILE`` once the executor started (a file written
whole, then renamed, not stdout, which a backend may log to); ``PID_FILE.reached``
follows once the executor is in ``STATE``, so the kill that follows always finds
it there:

``idle``
    no call in flight.
``call_running``
    a call (a worker-side sleep of an hour) runs in every worker: each worker
    left its marker file when its sleep started.
``replies_backed_up``
    hundreds of calls sent whose results (1 MiB each) the caller never reads:
    the reply path fills up and the workers block sending their replies. The
    count of calls sent so far is in ``PID_FILE.markers/submitted``.
``worker_hung_in_native_code``
    the last rank is blocked in a C call with SIGTERM ignored (its marker file
    is there); the other ranks answered.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from harness import ExecutorConfig, load_backend
from harness.conformance import probes
from harness.conformance._markers import seen
from harness.conformance._workers import worker_pids

STATES = ("idle", "call_running", "replies_backed_up", "worker_hung_in_native_code")
#: replies_backed_up: calls sent, and the size of each rank's result of each.
BACKED_UP_CALLS = 200
BACKED_UP_RESULT_BYTES = 1 << 20
#: How long the in-flight state may take to reach (a loaded machine), after start-up.
STATE_TIMEOUT_S = 60.0


def _wait_for(paths: list[Path], what: str, pids: list[int]) -> None:
    deadline = time.monotonic() + STATE_TIMEOUT_S
    while not all(seen(p, pids) for p in paths):
        if time.monotonic() > deadline:
            missing = [p.name for p in paths if not seen(p, pids)]
            raise SystemExit(f"{what}: no marker {missing} after {STATE_TIMEOUT_S:g} s")
        time.sleep(0.01)


def reach(ex: Any, world_size: int, state: str, markers: Path, pids: list[int]) -> list[Any]:
    """Bring ``ex`` to ``state``; returns what must stay referenced (the futures)."""
    if state == "idle":
        return []
    if state == "call_running":
        future = ex.collective_rpc(probes.sleep_marked, args=(str(markers), 3600.0), non_block=True)
        _wait_for([markers / f"rank-{r}" for r in range(world_size)], "the call did not start in every worker", pids)
        return [future]
    if state == "replies_backed_up":
        futures = []
        for n in range(1, BACKED_UP_CALLS + 1):
            futures.append(ex.collective_rpc(probes.zeros, args=(BACKED_UP_RESULT_BYTES,), non_block=True))
            # How far it got: the test tells calls that go in slowly from a caller that stopped.
            _write(str(markers / "submitted"), str(n))
        return futures
    if state == "worker_hung_in_native_code":
        marker = markers / "hung"
        future = ex.collective_rpc(
            probes.hang_in_native_code_on_rank, args=(world_size - 1, str(marker)), non_block=True
        )
        _wait_for([marker], f"rank {world_size - 1} did not hang", pids)
        return [future]
    raise SystemExit(f"unknown state {state!r}, expected one of {STATES}")


def main() -> None:
    spec, world_size, start_method, pid_file, state, nodes = (
        sys.argv[1],
        int(sys.argv[2]),
        sys.argv[3],
        sys.argv[4],
        sys.argv[5] if len(sys.argv) > 5 else "idle",
        int(sys.argv[6]) if len(sys.argv) > 6 else 1,
    )
    # The test's start-up bound, stretched with the load (a loaded machine must
    # not fail the start that C13 only needs as its setting).
    init_timeout_s = float(sys.argv[7]) if len(sys.argv) > 7 else ExecutorConfig.init_timeout_s
    config = ExecutorConfig(world_size, start_method=start_method, nodes=nodes, init_timeout_s=init_timeout_s)
    ex = load_backend(spec).factory(config)
    pids = worker_pids(ex)
    _write(pid_file, json.dumps(pids))
    markers = Path(pid_file + ".markers")
    markers.mkdir()
    in_flight = reach(ex, world_size, state, markers, pids)
    _write(pid_file + ".reached", state)
    time.sleep(3600)
    del in_flight


def _write(path: str, text: str) -> None:
    """Written whole, then renamed: the test never reads half a file."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
