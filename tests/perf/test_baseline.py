"""Against the stored baseline of this kind of machine.

Baselines are ``tests/perf/baselines/<fingerprint>.json``, recorded with the
commands below. Where this machine kind has none, a test skips with the
command that records one: an absolute baseline only means something on the
kind of machine that recorded it.

- CPU: an ``mp`` whose every call is late by twice the baseline's median step
  fails the comparison, and the message names the metric, the world size and
  the baseline's file. The delay is sized from the stored baseline, not fixed:
  a host of the same fingerprint can run ``mp`` well faster than the one that
  recorded it (CI's did, and read a 1 ms delay as "no change"), and a slowed
  step of at least twice the baseline's median is slower on any host. The
  smallest slowdown the suite catches (1 ms) is the A/B mode's to show, both
  sides on one host (``test_power.py``). Plain ``mp`` is not compared here:
  an absolute comparison is at the mercy of the host and its neighbours.
- GPU (``gpu and perf``, a dedicated runner): ``mp``'s engine step on CUDA is
  not slower than the stored GPU baseline.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.perf.baseline import Baseline, baseline_path, find_baseline, machine_fingerprint
from harness.perf.runner import open_side, parse_side, run_rounds
from harness.perf.stats import SLOWER, compare
from harness.perf.workloads import EngineStep

pytestmark = [pytest.mark.harness_perf, pytest.mark.harness_isolated, pytest.mark.harness_exclusive]

BASELINE_FOLDER = Path(__file__).parent / "baselines"
CPU = "mp@start_method=fork"
GPU = "mp@start_method=spawn,device=cuda,dist_backend=nccl"
WORLD_SIZE = 1  # as test_power.py: on 2 cores, the caller keeps a core of its own


def record(side: str) -> str:
    return (
        f"python -m harness bench --workload engine-step,round-trip --backend {side} --world-size 1 --update-baseline"
    )


def stored_or_skip(side: str, device: str) -> tuple[Baseline, Path]:
    fp = machine_fingerprint()
    path = baseline_path(BASELINE_FOLDER, fp)
    stored = find_baseline(BASELINE_FOLDER, fp)
    if stored is None:
        pytest.skip(f"no baseline for this machine ({fp.id}) in {BASELINE_FOLDER}; record one with: {record(side)}")
    if stored.lookup(side, "engine-step", WORLD_SIZE, device) is None:
        pytest.skip(f"the baseline {path} has no engine-step ws={WORLD_SIZE} {device} entry for {side}; {record(side)}")
    return stored, path


@pytest.mark.timeout(300)
def test_an_mp_late_by_twice_the_baselines_step_fails_the_baseline_comparison() -> None:
    stored, path = stored_or_skip(CPU, "cpu")
    entry = stored.lookup(CPU, "engine-step", WORLD_SIZE, "cpu")
    assert entry is not None
    delay_s = 2 * entry.metrics["step"].summary.median
    slowed = parse_side(f"tests.perf.regressed:delayed@start_method=fork,env.HARNESS_PERF_DELAY_S={delay_s:.6f}")
    work = EngineStep()
    work.use(entry.params)  # the baseline's calibrated work, not this process's
    with open_side(slowed, WORLD_SIZE) as ex:
        samples = run_rounds({"slowed": ex}, work, WORLD_SIZE, rounds=4, reps=25, warmup=10)["slowed"]
    verdict = compare(entry.metrics["step"].samples, samples["step"], "engine-step ws=1 step", entry.against(path))
    assert verdict.decision == SLOWER, verdict.message
    assert verdict.message.startswith("engine-step ws=1 step: slower, "), verdict.message
    assert str(path) in verdict.message, verdict.message


@pytest.mark.harness_gpu
@pytest.mark.timeout(600)
def test_mp_on_a_gpu_is_not_slower_than_the_stored_gpu_baseline() -> None:
    stored, path = stored_or_skip(GPU, "cuda")
    entry = stored.lookup(GPU, "engine-step", WORLD_SIZE, "cuda")
    assert entry is not None
    work = EngineStep(device="cuda")
    work.use(entry.params)
    with open_side(parse_side(GPU), WORLD_SIZE) as ex:
        samples = run_rounds({"gpu": ex}, work, WORLD_SIZE, rounds=4, reps=25, warmup=10)["gpu"]
    verdict = compare(entry.metrics["step"].samples, samples["step"], "engine-step ws=1 cuda step", entry.against(path))
    assert verdict.decision != SLOWER, verdict.message
