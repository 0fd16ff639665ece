"""Sides, workloads and the bench command's input: bad values are named before anything starts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness.__main__ import main
from harness.perf.runner import labels_for, parse_side, run_rounds
from harness.perf.workloads import Samples, calibrate_work, workload


def test_a_side_is_a_backend_spec_with_its_settings() -> None:
    side = parse_side("mp@start_method=spawn,env.OMP_NUM_THREADS=1")
    assert side.spec == "mp"
    config = side.config(2)
    assert config.start_method == "spawn" and dict(config.env) == {"OMP_NUM_THREADS": "1"}
    assert parse_side("pkg.mod:factory").spec == "pkg.mod:factory"


@pytest.mark.parametrize(
    "text, named",
    [
        ("mp@colour=red", "unknown setting 'colour'"),
        ("mp@start_method", "setting 'start_method' is not KEY=VALUE"),
        ("@start_method=fork", "no backend before '@'"),
    ],
)
def test_a_bad_side_is_named_with_where_it_came_from(text: str, named: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_side(text, "--compare")
    assert named in str(err.value) and repr(text) in str(err.value) and "--compare" in str(err.value)


def test_a_bad_setting_value_names_the_side() -> None:
    with pytest.raises(ValueError, match=r"side 'mp@start_method=teleport'.*start_method"):
        parse_side("mp@start_method=teleport").config(2)


def test_an_unknown_workload_names_the_value_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown workload 'warp' from --workload: expected one of round-trip"):
        workload("warp", "--workload")


def test_calibrated_work_takes_about_the_cpu_time_asked() -> None:
    # CPU time, not wall time: what calibration computes (iterations for the
    # time asked) does not depend on the load, the wall time of the same work
    # does (beside CI's other jobs, 10 ms of work took 53 ms).
    from harness.perf.workloads import Scheduler

    iterations = calibrate_work(0.01, timer=time.thread_time)
    tries = []
    with Scheduler() as scheduler:
        for _ in range(5):
            t0 = time.thread_time()
            scheduler.work(iterations)
            tries.append(time.thread_time() - t0)
    assert 0.003 < sorted(tries)[2] < 0.05, f"10 ms of work took {sorted(tries)[2] * 1000:.1f} ms of CPU"
    assert calibrate_work(0) == 0


class _Counting:
    """A workload that records the order in which sides were measured."""

    name = "counting"
    metrics = ("t",)

    def __init__(self) -> None:
        self.order: list[str] = []
        self.prepared: list[Any] = []
        self.finished: list[Any] = []

    def prepare(self, ex: Any, world_size: int) -> None:
        self.prepared.append(ex)

    def measure(self, ex: Any, world_size: int, reps: int) -> Samples:
        self.order.append(ex)
        return {"t": [0.001] * reps}

    def finish(self, ex: Any) -> None:
        self.finished.append(ex)


def test_rounds_alternate_the_sides_after_each_warm_up() -> None:
    w = _Counting()
    out = run_rounds({"A": "a", "B": "b"}, w, 2, rounds=3, reps=4, warmup=2, progress=lambda s: None, settle_s=0)
    assert w.order == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-ups, then A B, B A, A B
    assert w.prepared == ["a", "b"] and w.finished == ["a", "b"]
    assert {k: len(v["t"]) for k, v in out.items()} == {"A": 12, "B": 12}


def test_two_identical_sides_get_distinct_labels() -> None:
    assert labels_for(["mp", "mp"]) == ["A: mp", "B: mp"]
    assert labels_for(["mp", "ray"]) == ["mp", "ray"]


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--workload", "warp"], "unknown workload 'warp' from --workload"),
        (["--compare", "mp", "nosuch.module:f"], "argument --compare"),
        (["--compare", "mp", "mp@colour=red"], "unknown setting 'colour'"),
        (["--compare", "mp", "mp", "--update-baseline"], "--update-baseline records one backend's run"),
        (["--workload", "round-trip", "--rounds", "0"], "argument --rounds: expected an integer >= 1, got '0'"),
        # Found out after minutes of measuring, it read as an internal error (3).
        (["--compare", "mp", "mp", "--rounds", "4"], "argument --rounds: 4: an A/B run judges one median per round"),
        (["--workload", "round-trip", "--plot", "/no/such/folder/x.png"], "argument --plot: cannot write"),
        (["--curves", "bandwidth"], "unknown curve 'bandwidth' from --curves: expected one of payload, world-size"),
        (["--curves", ","], "--curves ',' names no curve"),
        (["--curves", "payload", "--compare", "mp", "mp"], "--curves measures each backend on its own"),
        # A gate no workload measures is bad input (4), never "B is slower" (1).
        (
            ["--workload", "round-trip", "--compare", "mp", "mp", "--gate", "bogus"],
            "argument --gate: 'bogus' is not a metric of workload 'round-trip': it measures 'latency'",
        ),
        (["--workload", "engine-step,round-trip", "--gate", "step"], "'step' is not a metric of workload 'round-trip'"),
        # A bad workload beside --compare is named as --workload's, not --compare's.
        (["--workload", "warp", "--compare", "mp", "mp"], "error: unknown workload 'warp' from --workload"),
    ],
)
def test_bench_refuses_bad_input_before_starting_anything(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", *argv])
    assert exit_.value.code == 4  # usage error (harness/__main__.py's convention)
    assert named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("missing_module", "argv", "named"),
    [
        ("scipy", ["--compare", "mp", "mp"], "argument --compare: --compare needs scipy, which is not installed"),
        ("matplotlib", ["--workload", "round-trip", "--plot", "x.png"], "argument --plot: --plot needs matplotlib"),
    ],
)
def test_a_missing_extra_is_refused_before_the_first_round_with_the_install_command(
    missing_module: str,
    argv: list[str],
    named: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An A/B run measures for minutes before it compares: a missing scipy must not cost them.
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == missing_module else real(name, *a)
    )
    with pytest.raises(SystemExit) as exit_:
        main(["bench", *argv])
    assert exit_.value.code == 4  # usage error (harness/__main__.py's convention)
    err = capsys.readouterr().err
    assert named in err and "pip install 'executor-harness[perf]'" in err


# ---- A/B runs: fresh executors each round, judged on the rounds' medians ----

CREATED: list[tuple[str, int]] = []
#: What a later run of the same side costs against its stored baseline: the caller's CPU times this.
SLOWED = {"CPU_S": 1.0}
#: The fake executors started and not yet shut down.
ALIVE: list[Any] = []


class _FakeExecutor:
    """Stands in for a backend: its "step" takes the seconds its env names."""

    def __init__(self, config: Any) -> None:
        self.world_size = config.world_size
        self.step_s = float(dict(config.env)["STEP_S"])
        #: The caller's and the workers' CPU per step (``_CallerAndWorkers``): the step's unless the env says.
        self.cpu_s = float(dict(config.env).get("CPU_S", self.step_s)) * SLOWED["CPU_S"]
        self.workers_s = float(dict(config.env).get("WORKERS_S", self.step_s))
        CREATED.append((dict(config.env)["STEP_S"], len(CREATED)))
        ALIVE.append(self)

    def shutdown(self) -> None:
        ALIVE.remove(self)


def fake(config: Any) -> _FakeExecutor:
    return _FakeExecutor(config)


class _Steps:
    name = "steps"
    metrics = ("step",)
    judged = ("step",)

    def __init__(self) -> None:
        self.calls = 0
        #: Executors alive when calibrate() ran, and beside each measured batch.
        self.alive_at_calibration: int | None = None
        self.alive_beside: list[int] = []

    def calibrate(self) -> None:
        self.alive_at_calibration = len(ALIVE)

    def prepare(self, ex: Any, world_size: int) -> None:
        pass

    def measure(self, ex: Any, world_size: int, reps: int) -> Samples:
        self.calls += 1
        self.alive_beside.append(len(ALIVE))
        # A little spread, the same on both sides, so the statistics have something to weigh.
        return {"step": [ex.step_s * (1 + 0.01 * ((self.calls + i) % 3)) for i in range(reps)]}

    def finish(self, ex: Any) -> None:
        pass


def test_an_ab_run_starts_both_sides_afresh_each_round_and_judges_the_rounds() -> None:
    from harness.perf.ab import run_ab
    from harness.perf.stats import NO_CHANGE, SLOWER

    CREATED.clear()
    a = parse_side("tests.unit.test_perf_runner:fake@env.STEP_S=0.001")
    b = parse_side("tests.unit.test_perf_runner:fake@env.STEP_S=0.0012")
    result = run_ab(a, b, _Steps, 1, rounds=6, reps=5, warmup=0, progress=lambda s: None, settle_s=0)
    assert [s for s, _ in CREATED] == ["0.001", "0.0012", "0.0012", "0.001"] * 3  # A B, then B A
    v = result.verdicts["step"]
    assert v.decision == SLOWER and result.b_is_slower, v.message
    assert (v.n_a, v.n_b) == (6, 6), "judged on the 6 rounds' medians, not the 30 steps"
    assert len(result.samples[next(iter(result.samples))]["step"]) == 30
    assert not ALIVE, "every side's executor is shut down"
    same = run_ab(a, a, _Steps, 1, rounds=6, reps=5, warmup=0, progress=lambda s: None, settle_s=0)
    assert same.verdicts["step"].decision == NO_CHANGE, same.verdicts["step"].message


def test_an_ab_run_measures_each_batch_with_only_its_own_sides_executor_alive() -> None:
    # What a side does beside its calls (the seed's spinning thread, from the
    # executor's creation to its shutdown) must not slow the other side's batches.
    from harness.perf.ab import run_ab

    workloads: list[_Steps] = []

    def make() -> _Steps:
        workloads.append(_Steps())
        return workloads[-1]

    a = parse_side("tests.unit.test_perf_runner:fake@env.STEP_S=0.001")
    b = parse_side("tests.unit.test_perf_runner:fake@env.STEP_S=0.0012")
    run_ab(a, b, make, 1, rounds=6, reps=5, warmup=2, progress=lambda s: None, settle_s=0)
    (w,) = workloads
    assert w.alive_beside == [1] * 24, "a warm-up and a batch per side per round, each beside no other executor"
    assert w.alive_at_calibration == 0, "calibrated before any side's executor started"
    assert not ALIVE


def test_an_ab_run_on_a_busy_machine_says_a_no_change_may_hide_a_change() -> None:
    from harness.perf import ab
    from harness.perf.stats import compare

    def result(b: list[float], load: float) -> ab.ABResult:
        verdict = compare([1.0, 1.01, 0.99, 1.0, 1.02, 0.98], b, "step", "A side: a")
        return ab.ABResult("engine-step", 1, "a", "b", {}, {"step": verdict}, "step", load)

    same = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98]
    busy = "\n".join(result(same, 5.3).lines())
    assert "the machine was busy (load 5.3 per CPU)" in busy and "'no change' may hide a change" in busy
    assert "busy" not in "\n".join(result(same, 0.4).lines())
    # A change found is a finding on any machine: no caveat.
    assert "busy" not in "\n".join(result([2.0, 2.02, 1.98, 2.0, 2.04, 1.96], 5.3).lines())


def test_an_ab_run_with_too_few_rounds_says_so() -> None:
    from harness.perf.ab import run_ab

    a = parse_side("tests.unit.test_perf_runner:fake@env.STEP_S=0.001")
    with pytest.raises(ValueError, match=r"3 rounds: judging step at p < 0.01 each needs at least 5 rounds"):
        run_ab(a, a, _Steps, 1, rounds=3, reps=5, warmup=0, progress=lambda s: None, settle_s=0)
    # Two metrics judged, each at p < 0.005: 5 rounds against 5 give at best p = 0.0079.
    with pytest.raises(ValueError, match=r"5 rounds: judging step, caller CPU at p < 0.005 each needs at least 6"):
        run_ab(a, a, _CallerAndWorkers, 1, rounds=5, reps=5, warmup=0, progress=lambda s: None, settle_s=0)


class _CallerAndWorkers(_Steps):
    """As engine-step: the step and the caller's CPU judged, the workers' CPU reported."""

    name = "caller-and-workers"
    metrics = ("step", "caller CPU", "workers CPU")
    judged = ("step", "caller CPU")

    def measure(self, ex: Any, world_size: int, reps: int) -> Samples:
        self.calls += 1
        spread = [1 + 0.01 * ((self.calls + i) % 3) for i in range(reps)]
        return {
            "step": [ex.step_s * f for f in spread],
            "caller CPU": [ex.cpu_s * f for f in spread],
            "workers CPU": [ex.workers_s * f for f in spread],
        }

    def params(self) -> dict[str, float]:
        return {}

    def use(self, params: Any) -> None:
        pass


FAKE = "tests.unit.test_perf_runner:fake@env.STEP_S=0.001"


@pytest.mark.parametrize(
    ("b", "gate", "status", "last"),
    [
        # A thread spinning beside the calls: the caller's CPU, not the step (vLLM's: -3 % and +52 %).
        (f"{FAKE},env.CPU_S=0.0015", None, 1, "B is slower than A: caller CPU +50.0 %"),
        (f"{FAKE},env.CPU_S=0.0015", "step", 0, "B is not significantly slower than A (judged: step)"),
        (f"{FAKE},env.CPU_S=0.0015", "caller CPU", 1, "B is slower than A: caller CPU +50.0 %"),
        (
            "tests.unit.test_perf_runner:fake@env.STEP_S=0.0013,env.CPU_S=0.0015",
            None,
            1,
            "B is slower than A: step +30.0 %, caller CPU +50.0 %",
        ),
        # The workers' side is reported, not judged: the same spinning thread took CPU from the workers.
        (
            f"{FAKE},env.CPU_S=0.001,env.WORKERS_S=0.002",
            None,
            0,
            "not significantly slower than A (judged: step, caller CPU)",
        ),
        (FAKE, None, 0, "B is not significantly slower than A (judged: step, caller CPU)"),
    ],
)
def test_an_ab_run_judges_every_metric_of_the_callers_side_unless_one_is_named(
    b: str,
    gate: str | None,
    status: int,
    last: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    import functools
    import json

    from harness.perf import ab
    from harness.perf.workloads import WORKLOADS

    monkeypatch.setitem(WORKLOADS, "caller-and-workers", _CallerAndWorkers)
    monkeypatch.setattr(ab, "run_ab", functools.partial(ab.run_ab, progress=lambda s: None, settle_s=0))
    argv = ["bench", "--compare", FAKE, b, "--workload", "caller-and-workers", "--world-size", "1"]
    # 6 rounds: the fewest at which each of two metrics can reach p < 0.005.
    argv += ["--rounds", "6", "--reps", "5", "--warmup", "0", *(["--gate", gate] if gate else [])]
    assert main([*argv, "--json", str(tmp_path / "ab.json")]) == status
    out = capsys.readouterr().out.splitlines()
    assert out[-1].endswith(last), "\n".join(out)
    gates = [line for line in out if line.endswith("<- gate")]
    assert len(gates) == (1 if gate else 2), "\n".join(out)
    (row,) = json.loads((tmp_path / "ab.json").read_text())
    assert row["gate"] == ([gate] if gate else ["step", "caller CPU"])
    assert bool(row["slower"]) == bool(status) and set(row["verdicts"]) == set(_CallerAndWorkers.metrics)


def test_a_list_of_sides_keeps_each_sides_settings_together() -> None:
    from harness.perf.runner import split_sides

    assert split_sides("mp,ray") == ["mp", "ray"]
    assert split_sides("mp@start_method=spawn,device=cuda,ray") == ["mp@start_method=spawn,device=cuda", "ray"]
    assert split_sides("a.b:f@env.X=1,env.Y=2, mp") == ["a.b:f@env.X=1,env.Y=2", "mp"]


def test_a_run_against_its_baseline_judges_the_callers_side_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The same side, its caller's CPU 50 % dearer than when its baseline was
    # stored, its step the same: slower, as an A/B run judges it.
    import functools

    from harness.perf import runner
    from harness.perf.workloads import WORKLOADS

    monkeypatch.setitem(WORKLOADS, "caller-and-workers", _CallerAndWorkers)
    monkeypatch.setattr(runner, "run_rounds", functools.partial(runner.run_rounds, progress=lambda s: None, settle_s=0))
    argv = ["bench", "--workload", "caller-and-workers", "--backend", FAKE, "--world-size", "1"]
    argv += ["--baseline-dir", str(tmp_path), "--rounds", "2", "--reps", "5", "--warmup", "0"]
    assert main([*argv, "--update-baseline"]) == 0
    capsys.readouterr()
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "this run is not significantly slower than the baseline (judged: caller-and-workers ws=1 step, "
        "caller-and-workers ws=1 caller CPU)"
    )
    monkeypatch.setitem(SLOWED, "CPU_S", 1.5)
    assert main(argv) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "this run is slower than the baseline: caller-and-workers ws=1 caller CPU +50.0 %", "\n".join(out)
    assert main([*argv, "--gate", "step"]) == 0
