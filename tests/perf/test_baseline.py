"""Against the stored baseline of this kind of machine: a slowed `mp` fails the comparison.

The baseline is ``tests/perf/baselines/<fingerprint>.json``, recorded with
``python -m harness bench --workload engine-step --backend mp@start_method=fork
--world-size 2 --update-baseline``. Where this machine has none, the test
skips with that command: an absolute baseline only means something on the
kind of machine that recorded it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.perf.baseline import baseline_path, find_baseline, machine_fingerprint
from harness.perf.runner import open_side, parse_side, run_rounds
from harness.perf.stats import SLOWER, compare
from harness.perf.workloads import EngineStep

pytestmark = [pytest.mark.perf, pytest.mark.isolated, pytest.mark.exclusive]

PLAIN = "mp@start_method=fork"
BASELINE_FOLDER = Path(__file__).parent / "baselines"
RECORD = (
    "python -m harness bench --workload engine-step --backend mp@start_method=fork --world-size 2 --update-baseline"
)


@pytest.mark.timeout(300)
def test_an_mp_slowed_by_a_millisecond_a_call_fails_the_baseline_comparison() -> None:
    fp = machine_fingerprint()
    stored = find_baseline(BASELINE_FOLDER, fp)
    if stored is None:
        pytest.skip(f"no baseline for this machine ({fp.id}) in {BASELINE_FOLDER}; record one with: {RECORD}")
    entry = stored.lookup(PLAIN, "engine-step", 2, "cpu")
    if entry is None:
        pytest.skip(f"the baseline {baseline_path(BASELINE_FOLDER, fp)} has no engine-step ws=2 entry; {RECORD}")
    slowed = parse_side("tests.perf.regressed:delayed@start_method=fork,env.HARNESS_PERF_DELAY_S=0.001")
    with open_side(slowed, 2) as ex:
        samples = run_rounds({"slowed": ex}, EngineStep(), 2, rounds=4, reps=25, warmup=10)["slowed"]
    verdict = compare(
        entry.metrics["step"].samples,
        samples["step"],
        "engine-step ws=2 step",
        entry.against(baseline_path(BASELINE_FOLDER, fp)),
    )
    assert verdict.decision == SLOWER, verdict.message
    assert "engine-step ws=2 step" in verdict.message, verdict.message
