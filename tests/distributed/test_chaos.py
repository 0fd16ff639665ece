"""A short chaos run per built-in backend, with a fixed seed: no violation, and a
run that did something (examples, faults of every kind the backend does not
declare away, a judged soak): a run that checked nothing must not read green."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.system.load import load_scale
from tests.chaos.runs import chaos

pytestmark = pytest.mark.chaos

#: (backend, world size, start method): ray starts its cluster once, in the run.
BUILT_IN = [("mp", 2, "fork"), ("uni", 1, "spawn"), ("ray", 2, "spawn")]
#: Seconds of each run on a quiet machine; a busy one stretches them (what a run
#: must have done, below, takes longer there, and must still be done).
DURATION_S = 30
#: The run's own bound on a quiet machine, past its duration: starting ray and
#: the executors of its examples, shutting them down, the soak's.
OVERHEAD_S = 330
#: pytest-timeout's bound is fixed at collection: a backstop past the longest
#: bound the run itself may get (``chaos`` kills the run and says so first).
#: CI's ray run took 1164 s at 10 to 15 runnable per CPU, near the 1200 s it had.
BOUND_CAP_S = 1800


@pytest.mark.timeout(BOUND_CAP_S + 60)
@pytest.mark.parametrize(("backend", "world_size", "start_method"), BUILT_IN, ids=[b for b, _, _ in BUILT_IN])
def test_a_short_chaos_run_of_a_built_in_backend_finds_nothing(
    backend: str, world_size: int, start_method: str, tmp_path: Path
) -> None:
    args = ["--backend", backend, "--world-size", str(world_size), "--start-method", start_method]
    duration = round(DURATION_S * load_scale())
    # Start-ups do not count in a run's duration (CI's loaded machine took
    # 147 s to start 7 executors), so its bound stretches with the load too.
    bound_s = min(OVERHEAD_S * load_scale() + duration, BOUND_CAP_S)
    code, report, out = chaos(tmp_path, *args, "--duration", str(duration), "--seed", "0", bound_s=bound_s)
    assert code == 0 and not report["findings"], f"exit {code}:\n{out[-4000:]}"
    assert report["examples"] >= 3, f"{report['examples']} examples ran:\n{out}"
    assert sum(report["faults"].values()) >= 10, f"faults injected: {report['faults']}:\n{out}"
    soak = report["soak"]
    assert soak is not None and soak["judged"], f"the soak was not judged:\n{out}"
