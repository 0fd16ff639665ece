"""A short chaos run per built-in backend, with a fixed seed: no violation, and a
run that did something (examples, faults of every kind the backend does not
declare away, a judged soak): a run that checked nothing must not read green."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.system.load import load_scale
from tests.chaos_runs import chaos

pytestmark = pytest.mark.chaos

#: (backend, world size, start method, operations): ray starts its cluster
#: once, in the run. Each run's schedule is a budget of operations, about what
#: 30 s of it did on a quiet 2-core machine (mp 613, uni 6474, ray 387 with seed
#: 0): the same seed runs the same operations however busy the machine is, so a
#: loaded machine makes the run longer, not smaller. A duration stretched by the
#: load average did both wrong in CI: just after a loaded step, a quiet machine
#: read as loaded ran six times the schedule, and a loaded one ran fewer examples.
BUILT_IN = [("mp", 2, "fork", 600), ("uni", 1, "spawn", 6000), ("ray", 2, "spawn", 380)]
#: Seconds of each run on a quiet machine: the soak gets its share of them
#: (``harness chaos --soak-share``) after the schedule's operations.
DURATION_S = 30
#: The run's own bound on a quiet machine, past its duration: starting ray and
#: the executors of its examples, shutting them down, the soak's.
OVERHEAD_S = 330
#: pytest-timeout's bound is fixed at collection: a backstop past the longest
#: bound the run itself may get (``chaos`` kills the run and says so first).
#: CI's ray run took 1164 s at 10 to 15 runnable per CPU, near the 1200 s it had.
BOUND_CAP_S = 1800


@pytest.mark.timeout(BOUND_CAP_S + 60)
@pytest.mark.parametrize(
    ("backend", "world_size", "start_method", "operations"), BUILT_IN, ids=[b[0] for b in BUILT_IN]
)
def test_a_short_chaos_run_of_a_built_in_backend_finds_nothing(
    backend: str, world_size: int, start_method: str, operations: int, tmp_path: Path
) -> None:
    args = ["--backend", backend, "--world-size", str(world_size), "--start-method", start_method]
    args += ["--operations", str(operations), "--duration", str(DURATION_S), "--seed", "0"]
    # A loaded machine takes longer over the same operations: the bound stretches.
    bound_s = min((OVERHEAD_S + DURATION_S) * load_scale(), BOUND_CAP_S)
    code, report, out = chaos(tmp_path, *args, bound_s=bound_s)
    assert code == 0 and not report["findings"], f"exit {code}:\n{out[-4000:]}"
    assert report["operations"] >= operations, f"{report['operations']} of {operations} operations ran:\n{out}"
    assert report["examples"] >= 3, f"{report['examples']} examples ran:\n{out}"
    assert sum(report["faults"].values()) >= 10, f"faults injected: {report['faults']}:\n{out}"
    soak = report["soak"]
    assert soak is not None and soak["judged"], f"the soak was not judged:\n{out}"
