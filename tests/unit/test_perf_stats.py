"""harness.perf.stats: the decision between two samples, its message, and the summary figures.

Samples are seeded lognormal latencies around 40 us (sigma 0.1, as a quiet
machine gives), so each case is reproducible and its preconditions are asserted.
"""

from __future__ import annotations

import builtins
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import harness.perf
from harness.perf.stats import (
    ALPHA,
    FASTER,
    MIN_SAMPLES,
    NO_CHANGE,
    SLOWER,
    Summary,
    Verdict,
    compare,
    fewest_samples,
    split_alpha,
    summary,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
AGAINST = "baseline tests/perf/baselines/x.json, recorded 2026-11-30 at abc123"


def latencies(seed: int, n: int = 200, scale: float = 1.0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(40e-6 * scale * rng.lognormal(0.0, 0.1, n))


def judge(a: list[float], b: list[float], **options: float) -> Verdict:
    return compare(a, b, "empty call", AGAINST, **options)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the decision


def test_a_15_percent_slowdown_is_slower_and_its_interval_holds_1_15() -> None:
    v = judge(latencies(1), latencies(2, scale=1.15))
    assert v.decision == SLOWER, v.message
    assert v.ci_low <= 1.15 <= v.ci_high, v.message
    assert v.ci_low > 1 + v.min_effect
    assert v.p_value < 1e-6


def test_a_15_percent_speed_up_is_faster() -> None:
    v = judge(latencies(1), latencies(2, scale=1 / 1.15))
    assert v.decision == FASTER, v.message
    assert v.ci_low <= 1 / 1.15 <= v.ci_high, v.message


def test_a_sample_against_itself_is_no_change() -> None:
    a = latencies(1)
    v = judge(a, a)
    assert v.decision == NO_CHANGE, v.message
    assert v.ratio == 1.0
    assert v.p_value > 0.5


def test_two_draws_of_one_distribution_are_no_change() -> None:
    v = judge(latencies(1), latencies(2))
    assert v.decision == NO_CHANGE, v.message
    assert v.ci_low < 1 < v.ci_high


def test_a_1_percent_shift_under_a_3_percent_min_effect_is_no_change() -> None:
    v = judge(latencies(1, n=1000), latencies(2, n=1000, scale=1.01), min_effect=0.03)
    assert v.decision == NO_CHANGE, v.message
    assert v.ci_high < 1.03


def test_a_real_change_above_min_effect_is_slower_though_its_interval_reaches_below_it() -> None:
    """The effect-size gate is the point ratio (asv's rule): a change that is
    real (p tiny, the interval clear of 1) and above min_effect by its
    estimate is reported, though the interval's low end is under min_effect."""
    v = judge(latencies(3), latencies(4, scale=1.045))
    assert v.p_value < v.alpha and v.ratio > 1.03 and 1 < v.ci_low < 1.03, v.message
    assert v.decision == SLOWER


def test_a_real_change_below_min_effect_is_no_change() -> None:
    v = judge(latencies(3, n=2000), latencies(4, n=2000, scale=1.02))
    assert v.p_value < v.alpha and v.ci_low > 1 and v.ratio < 1.03, v.message
    assert v.decision == NO_CHANGE


def test_an_interval_that_holds_no_change_is_no_change_whatever_the_estimate() -> None:
    noisy_a = [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    noisy_b = [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    v = judge(noisy_a, noisy_b, alpha=1.0 - 1e-12)
    assert v.ratio > 1.03 and v.ci_low <= 1, v.message
    assert v.decision == NO_CHANGE


def test_the_p_value_gates_too() -> None:
    v = judge(latencies(1), latencies(2, scale=1.15), alpha=1e-300)
    assert v.ci_low > 1.03
    assert v.decision == NO_CHANGE, v.message


def test_the_verdict_is_reproducible() -> None:
    a, b = latencies(5), latencies(6, scale=1.05)
    assert judge(a, b) == judge(a, b)


def test_constant_samples_compare_without_nan() -> None:
    v = judge([1e-5] * 5, [1e-5] * 5)
    assert (v.decision, v.ratio, v.ci_low, v.ci_high, v.p_value) == (NO_CHANGE, 1.0, 1.0, 1.0, 1.0)


def test_the_smallest_samples_can_reach_a_verdict() -> None:
    v = judge([1e-5] * MIN_SAMPLES, [2e-5] * MIN_SAMPLES)
    assert v.decision == SLOWER, v.message


def test_alpha_is_split_among_the_metrics_judged_and_sets_the_fewest_samples() -> None:
    # Bonferroni: two metrics judged at 0.005 each flag identical sides on
    # either in at most 1 % of runs, whatever their correlation.
    assert split_alpha(ALPHA, 1) == ALPHA == 0.01
    assert split_alpha(ALPHA, 2) == 0.005
    assert fewest_samples(0.01) == MIN_SAMPLES == 5
    # 5 against 5, every B above every A: p = 2/252 = 0.0079, short of 0.005.
    assert fewest_samples(0.005) == 6
    a, b = [1e-5 * (1 + i / 100) for i in range(5)], [2e-5 * (1 + i / 100) for i in range(5)]
    assert judge(a, b, alpha=0.005).decision == NO_CHANGE
    assert judge([*a, 1.05e-5], [*b, 2.05e-5], alpha=0.005).decision == SLOWER
    with pytest.raises(ValueError, match="at least one metric"):
        split_alpha(ALPHA, 0)


# --------------------------------------------------------------------------- the message


def test_the_message_names_metric_change_interval_p_and_baseline() -> None:
    v = Verdict(
        metric="empty call",
        against=AGAINST,
        decision=SLOWER,
        median_a=41.7e-6,
        median_b=47.8e-6,
        ratio=1.152,
        ci_low=1.121,
        ci_high=1.180,
        p_value=3.2e-9,
        n_a=200,
        n_b=200,
        alpha=0.01,
        min_effect=0.03,
        confidence=0.99,
    )
    assert v.message == (
        "empty call: slower, +15.2 % [+12.1 %, +18.0 %], p=3e-9; median 47.8 us against 41.7 us "
        f"(n=200 against 200); compared with {AGAINST}"
    )
    assert v.to_dict()["message"] == v.message


def test_a_no_change_message_says_what_a_verdict_needs() -> None:
    v = judge(latencies(1), latencies(2))
    assert v.message.startswith("empty call: no change, ")
    assert v.message.endswith(
        f"compared with {AGAINST} "
        "(a verdict needs p < 0.01, the 99 % interval clear of 0 and a change beyond \u00b13 %)"
    )


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("a", "b", "words"),
    [
        ([1e-5] * 4, [1e-5] * 5, ["'empty call'", "A (baseline", "4 samples, at least 5"]),
        ([1e-5] * 5, [1e-5] * 3, ["'empty call'", "B:", "3 samples, at least 5"]),
        ([1e-5] * 5, [1e-5, 1e-5, math.nan, 1e-5, 1e-5], ["'empty call'", "B:", "sample [2] is nan"]),
        ([1e-5, math.inf, *[1e-5] * 4], [1e-5] * 5, ["A (baseline", "sample [1] is inf"]),
        ([1e-5] * 5, [1e-5] * 4 + [-2e-6], ["B:", "sample [4] is -2e-06"]),
        ([0.0] * 5, [1e-5] * 5, ["A (baseline", "the median is 0"]),
        ([[1e-5] * 5], [1e-5] * 5, ["A (baseline", "flat list", "(1, 5)"]),
        ([1e-5] * 5, ["fast"] * 5, ["B:", "not numbers"]),
    ],
)
def test_bad_samples_are_a_value_error_naming_metric_side_and_value(
    a: list[float], b: list[float], words: list[str]
) -> None:
    with pytest.raises(ValueError) as info:
        judge(a, b)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("option", "value"),
    [("alpha", 0.0), ("alpha", 1.0), ("confidence", 1.5), ("min_effect", -0.01), ("min_effect", math.nan)],
)
def test_bad_settings_are_a_value_error_naming_them(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"'empty call': {option} must"):
        judge([1e-5] * 5, [1e-5] * 5, **{option: value})


# --------------------------------------------------------------------------- summary


def test_summary_of_one_to_ten() -> None:
    s = summary([float(x) for x in range(10, 0, -1)])
    assert s == Summary(
        n=10,
        median=5.5,
        p90=9.1,
        p99=9.91,
        mean=5.5,
        stdev=pytest.approx(3.0276503540974917),
        iqr=4.5,
        min=1.0,
        max=10.0,
    )


def test_summary_of_one_sample_has_no_spread() -> None:
    assert summary([2.0]) == Summary(n=1, median=2.0, p90=2.0, p99=2.0, mean=2.0, stdev=0.0, iqr=0.0, min=2.0, max=2.0)


def test_summary_round_trips_through_a_dict() -> None:
    s = summary(latencies(7, n=50))
    assert Summary.from_dict(s.to_dict()) == s


def test_summary_rejects_nothing_and_non_finite_values_by_name() -> None:
    with pytest.raises(ValueError, match="'step': no samples"):
        summary([], "step")
    with pytest.raises(ValueError, match=r"'step'.*sample \[1\] is nan"):
        summary([1.0, math.nan], "step")


# --------------------------------------------------------------------------- the package


def test_every_name_in_harness_perf_all_exists() -> None:
    assert [name for name in harness.perf.__all__ if not hasattr(harness.perf, name)] == []
    assert len(set(harness.perf.__all__)) == len(harness.perf.__all__)


def test_importing_harness_perf_imports_neither_scipy_nor_matplotlib_nor_torch() -> None:
    code = "import harness.perf, sys; print(sorted(m for m in ('scipy', 'matplotlib', 'torch') if m in sys.modules))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_without_scipy_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_scipy(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "scipy" or name.startswith("scipy."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    with pytest.raises(ImportError, match=r"comparing samples needs scipy.*pip install 'executor-harness\[perf\]'"):
        judge(latencies(1), latencies(2))
