"""The A/B mode against vLLM's own ``MultiprocExecutor``: the project's founding case.

The seed's regression as it shipped in vLLM is a caller-side thread polling the
reply queue from the executor's creation to its shutdown
(``tests.perf.regressed:spinning_beside``, here beside ``vllm-mp``). An A/B run
of vLLM against that must say "slower"; vLLM against itself must not.

Each round starts vLLM's executor once per side (about 14 s each alone on 2
cores), so a run of ``ROUNDS`` rounds takes minutes: these run in ``make
vllm-perf`` (marker ``perf``), never in ``make test``, alone on a quiet machine.
World size 2, as the regression was reported (TP=4 on GPUs, the most this
2-core machine gives a caller and its ranks).
"""

from __future__ import annotations

import pytest

from harness.perf.ab import ABResult, run_ab
from harness.perf.runner import parse_side
from harness.perf.stats import NO_CHANGE
from harness.perf.workloads import EngineStep

pytestmark = [pytest.mark.harness_perf, pytest.mark.harness_isolated, pytest.mark.harness_exclusive]

PLAIN = "vllm-mp"
BESIDE = "tests.perf.regressed:spinning_beside@env.HARNESS_PERF_INNER=vllm-mp"
WORLD_SIZE = 2
#: Twelve rounds: the rank test's smallest p at 12 against 12 is far below the
#: 0.5 % each judged metric needs, and a run stays near ten minutes.
ROUNDS = 12


def ab(b: str) -> ABResult:
    # No gate named, as `harness bench --compare` runs by default: the step and
    # the caller's CPU per step are judged, B slower when either is. The thread
    # costs the caller's CPU (+52 %, p = 6e-12, 40 rounds), not the step (-3 %).
    result = run_ab(parse_side(PLAIN), parse_side(b), EngineStep, WORLD_SIZE, rounds=ROUNDS, reps=25, warmup=10)
    print("\n".join(result.lines()))
    return result


@pytest.mark.timeout(1800)
def test_vllm_with_a_thread_spinning_beside_its_calls_is_flagged_slower() -> None:
    result = ab(BESIDE)
    assert result.b_is_slower, "\n".join(result.lines())
    assert "caller CPU" in result.slower, "\n".join(result.lines())


@pytest.mark.timeout(1800)
def test_vllm_against_itself_is_judged_no_change() -> None:
    result = ab(PLAIN)
    judged = {metric: result.verdicts[metric].decision for metric in result.gate}
    assert set(judged.values()) == {NO_CHANGE}, "\n".join(result.lines())
