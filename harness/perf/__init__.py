"""Performance against a reference: a stored baseline or the other side of an A/B run.

- ``stats``: the statistical decision (slower, faster, no change) between two
  samples of a metric, and the summary figures of one;
- ``baseline``: baselines stored per kind of machine (its fingerprint), read
  and written safely;
- ``plot``: the pictures of a comparison and of cost curves.

scipy and matplotlib (the ``perf`` extra) are imported only where a comparison
or a plot runs, so this package loads without them.
"""

from __future__ import annotations

from harness.perf.stats import (
    FASTER,
    MIN_SAMPLES,
    NO_CHANGE,
    SLOWER,
    Decision,
    Summary,
    Verdict,
    compare,
    format_seconds,
    summary,
)

__all__ = [
    "FASTER",
    "MIN_SAMPLES",
    "NO_CHANGE",
    "SLOWER",
    "Decision",
    "Summary",
    "Verdict",
    "compare",
    "format_seconds",
    "summary",
]
