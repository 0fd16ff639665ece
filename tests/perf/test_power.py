"""The perf tier's power: the A/B mode flags the seed's regression and leaves `mp` alone.

The full form (``perf_full``, ``pytest -m perf``) is issue 12's bar: 20 A/B runs
a side, the spinning reply thread flagged in at least 19, ``mp`` against itself
in at most 1; and issue 46's: the same regression living beside the calls (a
thread polling from the executor's start to its shutdown) flagged in at least
19 of 20. The quick form (one A/B run a side, seconds) runs in a plain
``pytest`` and last in ``make test``, alone (``make test-perf``): a certain
slowdown (a call 1 ms late) flagged, the thread beside the calls flagged
(40 rounds: about 18 s a run; up to four runs), ``mp`` against itself not.

No test names a gate: each judges what a plain ``harness bench --compare``
judges, every metric of the caller's side (the step and the caller's CPU per
step), B slower when either is, each at p < 0.005 so that identical sides are
flagged in at most 1 % of runs on the two together.

World size 1: ``mp``'s workers spin for 10 ms after a call, so at world size 2
on a 2-core machine the caller shares its core with a spinning worker, and the
rounds' medians scatter by 30 % (measured), more than the regression's cost.
At 1 the caller has a core of its own, as an engine's scheduler has. Each test
runs alone (``exclusive``): a neighbour's CPU would be noise on both sides.
Beside make test's other jobs (20 runnable per CPU) a call 1 ms late was judged
"no change", 99 % interval -16 % to +69 %: an A/B run on a busy machine says so.
"""

from __future__ import annotations

import pytest

from harness.perf.ab import ABResult, run_ab
from harness.perf.runner import parse_side
from harness.perf.stats import NO_CHANGE
from harness.perf.workloads import EngineStep

pytestmark = [pytest.mark.harness_perf, pytest.mark.harness_isolated, pytest.mark.harness_exclusive]

PLAIN = "mp@start_method=fork"
REGRESSED = "tests.perf.regressed:spinning_reply_thread@start_method=fork"
BESIDE = "tests.perf.regressed:spinning_beside@start_method=fork"
SLOWED = "tests.perf.regressed:delayed@start_method=fork,env.HARNESS_PERF_DELAY_S=0.001"
WORLD_SIZE = 1
FULL = {"rounds": 40, "reps": 25, "warmup": 10}
#: Ten rounds: with six, a verdict needs every round of B above every round of A
#: (the rank test's smallest p is 0.002), and one slow round of A left a call 1 ms
#: late "no change" in 1 of 10 runs; with ten it was flagged in 12 of 12 (AMD EPYC,
#: 2 CPUs, quiet; 6.6 s a run).
QUICK = {"rounds": 10, "reps": 25, "warmup": 10}


def ab(b: str, sizes: dict[str, int], a: str = PLAIN) -> ABResult:
    """One A/B run of the simulated engine step, judged as ``harness bench --compare`` judges it (no gate named)."""
    return run_ab(parse_side(a), parse_side(b), EngineStep, WORLD_SIZE, **sizes)


def _flagged(b: str, runs: int) -> tuple[int, list[str]]:
    results = [ab(b, FULL) for _ in range(runs)]
    return sum(r.b_is_slower for r in results), ["\n".join(r.lines()) for r in results]


@pytest.mark.timeout(120)
def test_a_call_a_millisecond_late_is_flagged_slower_in_one_ab_run() -> None:
    # The quick form checks the A/B machinery end to end on a slowdown that
    # is certain (1 ms on a step of about 2.2 ms: +44 to +67 %, flagged in 12 of
    # 12 quick runs, measured). The spinning reply thread's cost (+20 to +50 %) is flagged in
    # only 4 of 10 quick runs on this 2-core machine, whose step times jump
    # between about 0.6 and 1.1 ms within a run: the full form judges it.
    result = ab(SLOWED, QUICK)
    assert result.b_is_slower, "\n".join(result.lines())


#: A/B runs the quick form takes at most, stopping at the first that flags the thread beside the calls.
BESIDE_TRIES = 4


@pytest.mark.timeout(240)
def test_a_thread_spinning_beside_the_calls_is_flagged_in_one_of_four_ab_runs() -> None:
    # The seed's regression as it shipped: a thread polling from the executor's
    # start to its shutdown, in the caller's process; no call is slower for it
    # by itself. With both sides' executors alive at once, A's batches paid for
    # B's thread too and it read "no change". No gate is named: the default
    # verdict judges the caller's CPU per step beside the step, and the thread
    # costs that CPU whatever the cores do (+19 to +51 %, flagged in 20 of 20
    # runs of 40 rounds, p <= 1e-4; in 5 of 8 runs of 10 rounds): the step's
    # own time (+10 to +25 % in most runs, none in some: it depends on which
    # core the thread shares) is flagged in about half the runs, and a verdict
    # on the step alone, the default before, passed the thread (at world size
    # 2: step +35 %, p = 0.3, caller CPU +129 %, p = 3e-5, "not slower").
    # Those figures are an AMD EPYC's. On a 2-core Intel Xeon (2026-12-06) the
    # thread's cost per run was bimodal, about +120 to +175 % or about +3 %
    # (which core it shares), and one run of 40 rounds flagged it in 2 of 3, of
    # 80 rounds in 5 of 7; a bimodal B also moves its median under resampling,
    # so a run can give p < 0.005 with an interval reaching below +0 %. So the
    # quick form takes up to four runs, stopping at the first flag. A verdict
    # that cannot see the thread passes only on a false flag of identical sides
    # (about alpha, 1 % a run: some 4 % over four runs); the full form (19 of
    # 20 single runs) is the bar.
    runs = []
    while len(runs) < BESIDE_TRIES and not (runs and runs[-1].b_is_slower):
        runs.append(ab(BESIDE, FULL))
    assert runs[-1].b_is_slower, f"flagged in none of {len(runs)} A/B runs:\n" + "\n\n".join(
        "\n".join(r.lines()) for r in runs
    )


@pytest.mark.timeout(120)
def test_mp_against_itself_is_judged_no_change_in_one_ab_run() -> None:
    # Not a bound on the ratio: with a fresh executor each round, one quick
    # run's ratio of identical sides scattered from 0.77 to 1.42 (measured,
    # quiet machine). The test's own decision accounts for that scatter; it
    # calls identical sides different in at most alpha (1 %) of runs, on the
    # step and the caller's CPU together, and the full form below bounds how
    # often over 20.
    result = ab(PLAIN, QUICK)
    assert result.gate == ("step", "caller CPU"), "the default verdict judges the caller's side"
    judged = {metric: result.verdicts[metric].decision for metric in result.gate}
    assert set(judged.values()) == {NO_CHANGE}, "\n".join(result.lines())


@pytest.mark.timeout(900)
@pytest.mark.parametrize("runs, at_least", [pytest.param(20, 19, marks=pytest.mark.perf_full)])
def test_a_driver_thread_spinning_on_replies_is_flagged_slower(runs: int, at_least: int) -> None:
    flagged, messages = _flagged(REGRESSED, runs)
    assert flagged >= at_least, f"flagged in {flagged} of {runs} A/B runs:\n" + "\n".join(messages)


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("runs, at_least", [pytest.param(20, 19, marks=pytest.mark.perf_full)])
def test_a_thread_spinning_beside_the_calls_is_flagged_slower(runs: int, at_least: int) -> None:
    flagged, messages = _flagged(BESIDE, runs)
    assert flagged >= at_least, f"flagged in {flagged} of {runs} A/B runs:\n" + "\n".join(messages)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("runs, at_most", [pytest.param(20, 1, marks=pytest.mark.perf_full)])
def test_mp_against_itself_is_not_flagged(runs: int, at_most: int) -> None:
    # On the step and the caller's CPU together: one set of 20 runs, where a
    # gate per metric took two.
    flagged, messages = _flagged(PLAIN, runs)
    assert flagged <= at_most, f"flagged in {flagged} of {runs} A/B runs:\n" + "\n".join(messages)
