"""The chaos run's oracle (harness.chaos.model), its growth figures
(harness.system.growth), its shrinker and its command line, without executors."""

from __future__ import annotations

import random
import time
import types
from typing import Any

import pytest

from harness.__main__ import main
from harness.backends import load_backend
from harness.chaos import soak
from harness.chaos import state as chaos_state
from harness.chaos.model import Echo, Model, Outcome, Violation
from harness.chaos.run import ChaosReport, render
from harness.chaos.state import Finding, Run
from harness.contract import ExecutorConfig
from harness.system import growth


def replies(call: Echo, world_size: int = 2, token: str | None = None) -> list[Any]:
    """What every rank of ``call`` sends back (another call's token where given)."""
    tag = token or call.token
    data = call.data if token is None else Echo(tag, call.nbytes).data
    return [(rank, (tag, data), {"token": tag}) for rank in range(world_size)]


def clause_of(fn: Any) -> str:
    with pytest.raises(Violation) as info:
        fn()
    return info.value.clause


# ---- the oracle -------------------------------------------------------------------


def test_a_call_that_returns_its_own_replies_in_rank_order_passes() -> None:
    call = Echo("x1.1", 4096)
    Model(2).judge_echo(call, Outcome(value=replies(call)), "call")


def test_replies_out_of_rank_order_break_c1() -> None:
    call = Echo("x1.1", 10)
    assert clause_of(lambda: Model(2).judge_echo(call, Outcome(value=replies(call)[::-1]), "call")) == "C1"


def test_a_reply_of_another_call_breaks_c5_and_after_a_timeout_c7() -> None:
    call = Echo("x1.2", 10)
    stale = Outcome(value=replies(call, token="x1.1"))
    assert clause_of(lambda: Model(2).judge_echo(call, stale, "call")) == "C5"
    model = Model(2)
    model.judge_timeout(Outcome(error=TimeoutError("t"), seconds=0.4), 0.3, "stall", token="x1.1")
    assert clause_of(lambda: model.judge_echo(call, stale, "call")) == "C7"


def test_a_payload_cut_short_breaks_c17_and_a_small_one_c3() -> None:
    for nbytes, clause in ((8 << 20, "C17"), (100, "C3")):
        call = Echo("x1.1", nbytes)
        cut = [(r, (call.token, call.data[:-1]), {"token": call.token}) for r in range(2)]
        assert clause_of(lambda call=call, cut=cut: Model(2).judge_echo(call, Outcome(value=cut), "call")) == clause


def test_after_a_worker_error_a_call_that_fails_breaks_c6() -> None:
    model = Model(2)
    model.judge_worker_error(Outcome(error=ValueError("chaos error 7")), "chaos error 7", "raise")
    assert clause_of(lambda: model.judge_echo(Echo("x1.2", 0), Outcome(error=RuntimeError("stale")), "call")) == "C6"


def test_an_error_without_the_workers_message_breaks_c6() -> None:
    assert clause_of(lambda: Model(2).judge_worker_error(Outcome(error=RuntimeError("")), "boom", "raise")) == "C6"


def test_after_a_timeout_an_executor_may_fail_every_later_call_but_not_one_then_work() -> None:
    model = Model(2)
    model.judge_timeout(Outcome(error=TimeoutError("t"), seconds=0.5), 0.3, "timeout")
    model.judge_echo(Echo("x1.2", 0), Outcome(error=RuntimeError("unusable: a call timed out")), "call")
    call = Echo("x1.3", 0)
    assert clause_of(lambda: model.judge_echo(call, Outcome(value=replies(call)), "call")) == "C7"


def test_a_timeout_must_raise_timeout_error_in_time() -> None:
    assert clause_of(lambda: Model(2).judge_timeout(Outcome(value=[0, 1], seconds=1.0), 0.3, "t")) == "C7"
    late = Outcome(error=TimeoutError("t"), seconds=120.0)
    assert clause_of(lambda: Model(2).judge_timeout(late, 0.3, "t")) == "C7"


def test_after_a_death_every_later_call_fails_and_the_callback_runs_once() -> None:
    model = Model(2)
    model.died(time.monotonic())
    call = Echo("x1.1", 0)
    assert clause_of(lambda: model.judge_echo(call, Outcome(value=replies(call)), "call")) == "C8"
    model.judge_echo(call, Outcome(error=RuntimeError("rank 1 died")), "call")
    assert clause_of(lambda: model.judge_callbacks("kill", final=True)) == "C8"
    model.callbacks += [time.monotonic(), time.monotonic()]
    assert clause_of(lambda: model.judge_callbacks("kill")) == "C8"


def test_a_callback_without_a_death_breaks_c8() -> None:
    model = Model(2)
    model.callbacks.append(time.monotonic())
    assert clause_of(lambda: model.judge_callbacks("stall")) == "C8"


# ---- growth per 1,000 calls ----------------------------------------------------------


def test_growth_is_the_slope_per_thousand_calls_after_the_warm_up() -> None:
    samples = [(c, {("rank 0", "memory"): 100.0 + 50 * c, ("rank 0", "fds"): 30.0}) for c in range(0, 10_001, 250)]
    found = {(g.process, g.quantity): g for g in growth.growth_of(samples)}
    assert found[("rank 0", "memory")].per_1000 == pytest.approx(50_000)
    assert found[("rank 0", "fds")].per_1000 == 0 and not found[("rank 0", "fds")].over


def test_a_warm_up_that_stops_is_within_the_bound_over_the_last_window() -> None:
    # 20 MiB per 1,000 calls for 7,500 calls, then flat (Ray's driver grows, then stops).
    def memory(c: int) -> float:
        return float(min(c, 7_500) * 20 * (1 << 20) / 1000)

    samples = [(c, {("caller", "memory"): memory(c)}) for c in range(0, 20_001, 250)]
    first_window = [s for s in samples if s[0] <= 10_000]
    assert [g.over for g in growth.growth_of(first_window, since=5_000)] == [True]
    assert [g.over for g in growth.growth_of(samples, since=15_000)] == [False]


# ---- the soak's length -----------------------------------------------------------------


class _InProcess:
    """An executor whose two ranks answer in the caller, after ``delay_s`` a call."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def collective_rpc(self, method: Any, args: Any, kwargs: Any, unique_reply_rank: Any, non_block: bool) -> Any:
        from concurrent.futures import Future

        time.sleep(self.delay_s)
        out = [method(types.SimpleNamespace(rank=r), *args, **kwargs) for r in range(2)]
        reply = out if unique_reply_rank is None else out[unique_reply_rank]
        if not non_block:
            return reply
        future: Future[Any] = Future()
        future.set_result(reply)
        return future


def _stats() -> Any:
    return types.SimpleNamespace(stretched=[], calls=0)


def test_a_soak_too_short_to_be_judged_goes_on_until_it_has_the_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    # How long the soak goes on, not what it finds: the caller here is the test
    # process itself, whose memory its other tests move (CI read an xdist
    # worker's growth as a C10 violation). Its figures stand still.
    monkeypatch.setattr(soak, "measure", lambda processes: {("caller", "memory"): 1.0})
    result = soak.soak(_InProcess(), [None, None], 0.01, random.Random(0), _stats())
    assert result.judged and growth.enough_to_judge(result.calls)
    assert result.calls - int(result.calls * growth.WARM_UP) < growth.JUDGED_FROM_CALLS + 8, "it stops once judged"


def test_a_soak_that_cannot_make_the_calls_in_its_cap_says_c10_was_not_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(soak, "EXTEND", 0.0)
    monkeypatch.setattr(soak, "EXTEND_AT_LEAST_S", 0.3)
    monkeypatch.setattr(soak, "load_scale", lambda: 1.0)
    started = time.monotonic()
    result = soak.soak(_InProcess(delay_s=0.002), [None, None], 0.1, random.Random(0), _stats())
    assert time.monotonic() - started < 2.0 and not result.judged
    report = ChaosReport("fake", 2, "spawn", 0, 0.1)
    report.soak = result
    assert "NOT judged, C10 not checked" in render(report)


# ---- shrinking -----------------------------------------------------------------------


class _Machine:
    """Fails when its steps hold both "a" and "b", at the later of the two."""

    guards: dict[str, Any] = {}

    def __init__(self) -> None:
        self.log: list[str] = []
        self.seen: set[str] = set()

    def start(self) -> None:
        self.log.append("start")

    def teardown(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        def step() -> None:
            self.log.append(name)
            self.seen.add(name)
            if {"a", "b"} <= self.seen:
                raise Violation("C5", f"{name} after the other")

        return step


def test_the_shrinker_cuts_the_steps_down_to_those_the_violation_needs() -> None:
    run = Run(load_backend("mp"), ExecutorConfig(world_size=2), 60, 0, 0.0, 30)
    steps: list[tuple[str, dict[str, Any]]] = [(name, {}) for name in "xyaxzyxbzzy"]
    shrunk = run.shrink(_Machine, Finding("C5", "b after the other", ["..."], 1.0, steps))
    assert [name for name, _ in shrunk.steps] == ["a", "b"]
    assert shrunk.operations == ["start", "a", "b"] and shrunk.replayed == "failed again"


def test_a_finding_that_does_not_fail_again_is_kept_and_said_to_be_timing() -> None:
    run = Run(load_backend("mp"), ExecutorConfig(world_size=2), 60, 0, 0.0, 30)
    finding = Finding("C5", "once", ["start", "x"], 1.0, [("x", {})])
    assert run.shrink(_Machine, finding).replayed.startswith("did not fail again")


def test_a_slow_executor_start_does_not_eat_the_schedules_time() -> None:
    """A loaded machine slows start-ups; the schedule's operations keep their time
    (CI once got 9 faults where 10 were asked: start-ups took 147 s of 180)."""

    def slow_factory(config: ExecutorConfig) -> str:
        time.sleep(0.3)
        return "executor"

    loaded = types.SimpleNamespace(name="slow", factory=slow_factory)
    run = Run(loaded, ExecutorConfig(world_size=2), 60, 0, 0.25, 30)  # type: ignore[arg-type]
    ends = run.schedule_ends
    assert run.start_executor() == "executor"
    assert run.starts_s >= 0.3 and run.schedule_ends - ends == pytest.approx(run.starts_s)


def test_the_runs_set_up_does_not_eat_the_schedules_time() -> None:
    """A backend's session (ray: its cluster) starts before the first operation;
    on a loaded machine that took a whole run's duration (CI: 0 examples)."""
    loaded = types.SimpleNamespace(name="slow-session", factory=lambda config: "executor")
    run = Run(loaded, ExecutorConfig(world_size=2), 60, 0, 0.25, 30)  # type: ignore[arg-type]
    ends = run.schedule_ends
    time.sleep(0.3)  # the session's start
    run.set_up()
    assert run.schedule_ends - ends >= 0.3


def test_an_executor_start_gets_a_start_up_bound_stretched_with_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend's own init_timeout_s stretches as the run's wait does (CI once
    read C10 for ray: 'could not initialise torch.distributed within 120 s' at 42.8 runnable per CPU)."""
    seen: list[ExecutorConfig] = []
    monkeypatch.setattr(chaos_state, "start_up_scale", lambda: 6.0)
    loaded = types.SimpleNamespace(name="records", factory=lambda config: seen.append(config) or "executor")
    run = Run(loaded, ExecutorConfig(world_size=2), 60, 0, 0.25, 30)  # type: ignore[arg-type]
    assert run.start_executor() == "executor"
    assert seen[0].init_timeout_s == 6.0 * ExecutorConfig.init_timeout_s
    assert seen[0].world_size == 2


# ---- the command line ------------------------------------------------------------------


def test_an_unknown_backend_is_a_clear_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "--backend", "nosuch", "--duration", "1"]) == 4
    err = capsys.readouterr().err
    assert "'nosuch'" in err and "the command line" in err


def test_a_world_size_the_backend_does_not_support_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "--backend", "uni", "--world-size", "2", "--duration", "1"]) == 4
    assert "--world-size 2" in capsys.readouterr().err


def test_a_negative_duration_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["chaos", "--backend", "mp", "--duration", "-5"])
    assert "-5" in capsys.readouterr().err


def test_a_declared_clause_that_does_not_exist_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "--backend", "mp", "--declare", "C99", "--duration", "1"]) == 4
    assert "'C99'" in capsys.readouterr().err


def test_a_reply_not_echos_right_after_a_fault_is_charged_to_the_faults_clause() -> None:
    # A stale reply of a call that raised on another rank is that call's value, not echo's.
    model = Model(2)
    model.judge_worker_error(Outcome(error=ValueError("chaos error 1")), "chaos error 1", "raise")
    call = Echo("x1.2", 0)
    assert clause_of(lambda: model.judge_echo(call, Outcome(value=[0, 1]), "call")) == "C6"


def test_the_replay_command_declares_what_the_run_declared() -> None:
    report = ChaosReport("vllm-mp", 2, "spawn", 1, 600)
    assert "--declare" not in report.replay
    report.declared = ["C2", "C7"]
    assert report.replay.endswith("--duration 600 --seed 1 --declare C2,C7")
    assert report.as_dict()["declared"] == ["C2", "C7"]
