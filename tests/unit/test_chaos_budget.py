"""A chaos run's budget of operations (``--operations``): the same seed runs the
same operations on a loaded machine as on a quiet one, and a finding's replay
line stops at the operation it was found at."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import pytest

from harness.__main__ import main
from harness.backends import load_backend
from harness.chaos import machine
from harness.chaos.run import ChaosReport, run_chaos
from harness.chaos.state import Finding, Run, TimeUp
from harness.contract import ExecutorConfig


def _run(operations: int | None) -> Run:
    return Run(load_backend("mp"), ExecutorConfig(world_size=2), 60, 0, 0.3, 30, operations)


def test_a_budget_of_operations_ends_the_schedule_after_that_many_however_long_they_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = _run(3)
    monkeypatch.setattr(time, "monotonic", lambda: run.schedule_ends + 1000)  # its seconds long gone
    for _ in range(3):
        run.tick()
        run.stats.operations += 1
    with pytest.raises(TimeUp):
        run.tick()


def test_without_a_budget_the_schedule_ends_at_its_share_of_the_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(None)
    run.tick()
    monkeypatch.setattr(time, "monotonic", lambda: run.schedule_ends + 1)
    with pytest.raises(TimeUp):
        run.tick()


def test_a_findings_replay_line_runs_up_to_the_operation_it_was_found_at() -> None:
    report = ChaosReport("mp", 2, "fork", 0, 60, operations=400)
    assert report.replay.endswith("--duration 60 --seed 0 --operations 400")
    report.findings = [Finding("C8", "no callback", ["start", "kill rank 0 idle"], 29.0, [], at_operation=273)]
    assert report.replay.endswith("--seed 0 --operations 273")
    assert report.as_dict()["findings"][0]["at_operation"] == 273
    assert report.as_dict()["operations_budget"] == 400


def test_a_run_by_duration_with_a_finding_replays_up_to_its_operation_too() -> None:
    report = ChaosReport("mp", 2, "fork", 5, 60)
    assert "--operations" not in report.replay
    report.findings = [Finding("C7", "late", ["start"], 7.0, [], at_operation=99)]
    assert report.replay.endswith("--duration 60 --seed 5 --operations 99")


def test_a_budget_below_one_operation_is_refused_naming_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["chaos", "--backend", "uni", "--world-size", "1", "--operations", "0"])
    assert "'0'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--operations 0 from a test"):
        run_chaos("uni", 1, 10, 0, operations=0, where="a test")


PLAIN_RECORDED = machine._recorded


def _recording(monkeypatch: pytest.MonkeyPatch, seen: list[str], delay_s: float) -> None:
    """Every operation of the machine noted, each ``delay_s`` late (a loaded machine)."""
    plain = PLAIN_RECORDED

    def recorded(fn: Callable[..., None]) -> Callable[..., None]:
        body = plain(fn)

        @functools.wraps(fn)
        def noted(self: Any, **kwargs: Any) -> None:
            time.sleep(delay_s)
            ran = True
            try:
                body(self, **kwargs)
            except TimeUp:  # the budget spent: no operation ran
                ran = False
                raise
            finally:
                if ran:
                    seen.append(f"{fn.__name__}{sorted(kwargs.items())}")

        return noted

    monkeypatch.setattr(machine, "_recorded", recorded)


@pytest.mark.timeout(120)
def test_the_same_seed_and_budget_run_the_same_operations_on_a_slower_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quick: list[str] = []
    slow: list[str] = []
    _recording(monkeypatch, quick, 0.0)
    first = run_chaos("uni", 1, 2, 7, operations=40, soak_share=0)
    _recording(monkeypatch, slow, 0.05)  # 2 s of a 2 s duration: a run by seconds would stop early
    second = run_chaos("uni", 1, 2, 7, operations=40, soak_share=0)
    assert not first.findings and not second.findings, (first.findings, second.findings)
    assert len(quick) == 40 and slow == quick


def test_the_command_line_loads_the_backend_of_a_chaos_run_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness import __main__ as cli
    from harness.chaos import run as chaos_run

    loads: list[str] = []
    real = chaos_run.load_backend

    def counted(spec: str, **kw: Any) -> Any:
        loads.append(spec)
        return real(spec, **kw)

    monkeypatch.setattr(chaos_run, "load_backend", counted)
    argv = [
        "chaos",
        "--backend",
        "uni",
        "--world-size",
        "1",
        "--duration",
        "2",
        "--operations",
        "5",
        "--soak-share",
        "0",
    ]
    assert cli.main(argv) == 0
    assert loads == ["uni"]
