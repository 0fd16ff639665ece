"""The statistical decision: is sample B slower than sample A, faster, or neither?

Two samples of one metric (per-call latencies, CPU seconds per step; floats,
seconds) go in: A is the baseline or the A side of an A/B run, B the current
run or the B side. Out comes a ``Verdict``:

- the median of each side and their ratio B/A, with a bootstrap confidence
  interval on that ratio (``scipy.stats.bootstrap``, seeded: the same samples
  give the same interval);
- the Mann-Whitney U p-value of the two samples (``scipy.stats.mannwhitneyu``);
- the decision, ``slower`` only when the change is real *and* large enough to
  matter: p < ``alpha``, the interval lies wholly above 1 (no change), and
  the ratio of medians is at least ``1 + min_effect``; ``faster``
  symmetrically (below 1, and at most ``1 / (1 + min_effect)``); ``no
  change`` otherwise.

Why the point ratio, not the interval's bound, gates the effect size (asv's
rule): with the bound, the smallest change flagged reliably is ``min_effect``
plus the interval's half-width, and on a shared 2-core machine the rounds of
an A/B run scatter by a few percent, so that half-width is 3-5 % even at 40
rounds. Measured with the bound as the gate: a 5 % slowdown flagged in 3 of
20 A/B runs (p below 1e-5 in all of them). ``min_effect`` is the size of a
change worth failing a pipeline for; the test and the interval say whether
the change is real. The price: a true change of exactly ``min_effect`` is
flagged about half the time, so a change is caught reliably from a little
above it.

A verdict that judges several metrics (an A/B run's default: every metric of
the caller's side its workload measures, ``Workload.judged``) fails when any of
them is slower, so identical sides would be flagged more often than on one. It
splits ``ALPHA`` among them (``split_alpha``, Bonferroni): each is judged at
``ALPHA / k``, and identical sides are flagged on any of the ``k`` in at most
``ALPHA`` of runs however the metrics move together. Only the p-value's
threshold is split: the interval and the effect size are further conditions,
which can only lower that rate.

A stored baseline keeps its raw samples (at most ``MAX_STORED_SAMPLES``, see
``harness.perf.baseline``) next to their ``summary``, so that a comparison with
a baseline runs exactly these statistics, not a weaker test on summary figures.

scipy is imported when a comparison runs: this module loads without it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from harness.perf import _fields
from harness.perf._extra import missing

__all__ = [
    "ALPHA",
    "FASTER",
    "MIN_SAMPLES",
    "NO_CHANGE",
    "SLOWER",
    "Decision",
    "Summary",
    "Verdict",
    "compare",
    "fewest_samples",
    "format_seconds",
    "split_alpha",
    "summary",
]

Decision = Literal["slower", "faster", "no change"]
SLOWER: Decision = "slower"
FASTER: Decision = "faster"
NO_CHANGE: Decision = "no change"

#: Fewest samples per side: below it the U test cannot reach p < 0.01 at all
#: (4 against 4 gives p >= 0.029), and a bootstrap of a median resamples a
#: handful of values.
MIN_SAMPLES = 5

#: The chance a verdict calls identical sides different: of one metric, or of
#: all the metrics it judges together (``split_alpha``).
ALPHA = 0.01


def split_alpha(alpha: float, judged: int) -> float:
    """The p-value each of ``judged`` metrics must beat so that a verdict over
    all of them flags identical sides in at most ``alpha`` of runs: a
    Bonferroni split, which holds however the metrics are correlated (the
    step and the caller's CPU per step are)."""
    if judged < 1:
        raise ValueError(f"a verdict judges at least one metric, got {judged}")
    return alpha / judged


def fewest_samples(alpha: float) -> int:
    """The fewest samples per side at which the two-sided U test can give
    p < ``alpha`` at all: every sample of B beyond every sample of A, p = 2 / C(2n, n).
    5 for p < 0.01, 6 for p < 0.005 (5 against 5 gives at best p = 0.0079)."""
    n = 1
    while 2 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


# --------------------------------------------------------------------------- samples


def _checked(samples: Sequence[float] | np.ndarray[Any, Any], metric: str, side: str) -> np.ndarray[Any, Any]:
    """``samples`` as a float array, or a ValueError naming the metric, the side and the bad value."""
    try:
        values = np.asarray(samples, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{metric!r}, {side}: samples are not numbers: {exc}") from None
    if values.ndim != 1:
        raise ValueError(f"{metric!r}, {side}: expected a flat list of seconds, got shape {values.shape}")
    for i, value in enumerate(values.tolist()):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{metric!r}, {side}: sample [{i}] is {value!r}, expected a finite number of seconds >= 0")
    return values


@dataclass(frozen=True)
class Summary:
    """The figures of a sample that a person reads (seconds); see ``summary``."""

    n: int
    median: float
    p90: float
    p99: float
    mean: float
    #: Sample standard deviation (n - 1 in the denominator); 0 for a single sample.
    stdev: float
    #: Interquartile range, p75 - p25: the spread a stray outlier does not move.
    iqr: float
    min: float
    max: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "summary") -> Summary:
        """The summary ``to_dict`` wrote; a ``_fields.FieldError`` names a missing or mistyped field."""
        d = _fields.obj(data, where)
        n = _fields.integer(d, "n", where)
        if n < 1:
            raise _fields.FieldError(_fields.join(where, "n"), f"expected at least 1 sample, got {n}")
        figures = {name: _fields.number(d, name, where) for name in _FIGURES}
        return cls(n=n, **figures)


_FIGURES = ("median", "p90", "p99", "mean", "stdev", "iqr", "min", "max")


def summary(samples: Sequence[float] | np.ndarray[Any, Any], metric: str = "samples") -> Summary:
    """Median, p90, p99, mean, stdev, IQR, min, max and n of ``samples``.

    Percentiles interpolate linearly between order statistics (numpy's default).
    A non-finite or negative value is a ValueError naming ``metric``.
    """
    values = _checked(samples, metric, "summary")
    if values.size == 0:
        raise ValueError(f"{metric!r}: no samples to summarise")
    p25, p50, p75, p90, p99 = np.percentile(values, [25, 50, 75, 90, 99])
    return Summary(
        n=int(values.size),
        median=float(p50),
        p90=float(p90),
        p99=float(p99),
        mean=float(values.mean()),
        stdev=float(values.std(ddof=1)) if values.size > 1 else 0.0,
        iqr=float(p75 - p25),
        min=float(values.min()),
        max=float(values.max()),
    )


# --------------------------------------------------------------------------- the verdict


def format_seconds(seconds: float) -> str:
    """``seconds`` in the unit that reads best: ``41.7 us``, ``47.8 ms``, ``1.20 s``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _percent(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f} %"


def _format_p(p: float) -> str:
    if p == 0:
        # The normal approximation underflows far beyond any alpha anyone sets.
        return "p<1e-300"
    mantissa, _, exponent = f"{p:.1g}".partition("e")
    return f"p={mantissa}e{int(exponent)}" if exponent else f"p={mantissa}"


@dataclass(frozen=True)
class Verdict:
    """B against A for one metric: the figures, the test's settings and the decision."""

    metric: str
    #: What A is: "baseline tests/perf/baselines/x.json, recorded 2026-11-30 at abc123", "A side: mp".
    against: str
    decision: Decision
    median_a: float
    median_b: float
    #: median(B) / median(A), and its bootstrap confidence interval.
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    n_a: int
    n_b: int
    alpha: float
    min_effect: float
    confidence: float

    @property
    def change(self) -> str:
        """B against A in percent: ``+52.5 %``."""
        return _percent(self.ratio)

    @property
    def message(self) -> str:
        """What a failing check prints: metric, change with its interval, p, and what B was compared with."""
        text = (
            f"{self.metric}: {self.decision}, {_percent(self.ratio)} [{_percent(self.ci_low)}, "
            f"{_percent(self.ci_high)}], {_format_p(self.p_value)}; median {format_seconds(self.median_b)} against "
            f"{format_seconds(self.median_a)} (n={self.n_b} against {self.n_a}); compared with {self.against}"
        )
        if self.decision == NO_CHANGE:
            text += (
                f" (a verdict needs p < {self.alpha:g}, the {self.confidence * 100:g} % interval "
                f"clear of 0 and a change beyond \u00b1{self.min_effect * 100:g} %)"
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message}


def _ratio_of_medians(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], axis: int = -1) -> np.ndarray[Any, Any]:
    median_a = np.median(a, axis=axis)
    median_b = np.median(b, axis=axis)
    # A resample of A may have a median of 0 (CPU seconds of an idle caller):
    # the ratio is then unbounded, or no change when B's median is 0 too.
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = median_b / median_a
    return np.where(median_a > 0, ratio, np.where(median_b > 0, np.inf, 1.0))


def compare(
    a: Sequence[float] | np.ndarray[Any, Any],
    b: Sequence[float] | np.ndarray[Any, Any],
    metric: str,
    against: str,
    *,
    alpha: float = ALPHA,
    min_effect: float = 0.03,
    confidence: float = 0.99,
    n_resamples: int = 9999,
    seed: int = 0,
) -> Verdict:
    """Judge sample ``b`` against sample ``a`` of ``metric`` (seconds); see the module's docstring.

    ``against`` says what ``a`` is, for the message. ``seed`` fixes the
    bootstrap's resampling: the same samples and settings give the same verdict.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"{metric!r}: alpha must lie in (0, 1), got {alpha!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"{metric!r}: confidence must lie in (0, 1), got {confidence!r}")
    if not (math.isfinite(min_effect) and min_effect >= 0):
        raise ValueError(f"{metric!r}: min_effect must be a fraction >= 0 (0.03 for 3 %), got {min_effect!r}")
    sides = {"A": f"A ({against})", "B": "B"}
    xa = _checked(a, metric, sides["A"])
    xb = _checked(b, metric, sides["B"])
    for side, values in (("A", xa), ("B", xb)):
        if values.size < MIN_SAMPLES:
            raise ValueError(f"{metric!r}, {sides[side]}: {values.size} samples, at least {MIN_SAMPLES} needed")
    median_a, median_b = float(np.median(xa)), float(np.median(xb))
    if median_a <= 0 or median_b <= 0:
        side = sides["A"] if median_a <= 0 else sides["B"]
        raise ValueError(f"{metric!r}, {side}: the median is 0; a ratio of medians needs both above 0")
    try:
        from scipy import stats as scipy_stats
    except ImportError as exc:
        raise missing("scipy", "comparing samples") from exc

    # Two-sided, not "greater": the verdict reports both directions, and a
    # two-sided test at alpha keeps the chance of a false verdict of either
    # kind at alpha; two one-sided tests would double it.
    if np.ptp(np.concatenate([xa, xb])) == 0:
        p_value = 1.0  # all values equal: the U statistic has no spread, scipy would return nan
    else:
        p_value = float(scipy_stats.mannwhitneyu(xa, xb, alternative="two-sided").pvalue)

    # Percentile, not scipy's default BCa: BCa estimates its acceleration with
    # the jackknife, which is known to be inconsistent for the median (a
    # non-smooth statistic), and it warns or fails on samples with many ties.
    options: dict[str, Any] = {}
    if "rng" in inspect.signature(scipy_stats.bootstrap).parameters:
        options["rng"] = np.random.default_rng(seed)
    else:  # scipy < 1.15 takes a Generator as random_state
        options["random_state"] = np.random.default_rng(seed)
    result = scipy_stats.bootstrap(
        (xa, xb),
        _ratio_of_medians,
        n_resamples=n_resamples,
        batch=max(1, 4_000_000 // (xa.size + xb.size)),  # bounds memory for long samples
        vectorized=True,
        paired=False,
        confidence_level=confidence,
        method="percentile",
        **options,
    )
    ci_low, ci_high = float(result.confidence_interval.low), float(result.confidence_interval.high)

    decision: Decision = NO_CHANGE
    ratio = median_b / median_a
    if p_value < alpha and ci_low > 1 and ratio >= 1 + min_effect:
        decision = SLOWER
    # Symmetric on the ratio's log scale: B is faster when A is min_effect slower than B.
    elif p_value < alpha and ci_high < 1 and ratio <= 1 / (1 + min_effect):
        decision = FASTER
    return Verdict(
        metric=metric,
        against=against,
        decision=decision,
        median_a=median_a,
        median_b=median_b,
        ratio=ratio,
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p_value,
        n_a=int(xa.size),
        n_b=int(xb.size),
        alpha=alpha,
        min_effect=min_effect,
        confidence=confidence,
    )
