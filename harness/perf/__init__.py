"""Performance against a reference: a stored baseline or the other side of an A/B run.

- ``stats``: the statistical decision (slower, faster, no change) between two
  samples of a metric, and the summary figures of one;
- ``baseline``: baselines stored per kind of machine, read and written safely;
- ``machine``: that kind of machine (its fingerprint), the commit, the time;
- ``workloads``, ``runner``, ``ab``: what a benchmark does to an executor,
  how rounds are run, and A/B runs;
- ``curves``: how a backend's cost grows with payload size and world size;
- ``plot``: the pictures of a comparison and of cost curves;
- ``bench``: ``harness bench``, the round trip of an empty call against its
  yardsticks.

scipy and matplotlib (the ``perf`` extra) are imported only where a comparison
or a plot runs, so this package loads without them.

It may import the suite's probes and models, the loader, the public API,
``harness.system``, ``harness.contract``, and the executors' pieces it measures
(``harness.executors.mp.shm``); never the plugin.
"""

from __future__ import annotations

from harness.perf.baseline import (
    BASELINE_FOLDER,
    FINGERPRINT_FIELDS,
    MAX_STORED_SAMPLES,
    SCHEMA_VERSION,
    Baseline,
    BaselineError,
    Distribution,
    Entry,
    Fingerprint,
    baseline_path,
    find_baseline,
    git_commit,
    load_baseline,
    machine_fingerprint,
    store_baseline,
)
from harness.perf.plot import plot_comparison, plot_curves
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
    "BASELINE_FOLDER",
    "FASTER",
    "FINGERPRINT_FIELDS",
    "MAX_STORED_SAMPLES",
    "MIN_SAMPLES",
    "NO_CHANGE",
    "SCHEMA_VERSION",
    "SLOWER",
    "Baseline",
    "BaselineError",
    "Decision",
    "Distribution",
    "Entry",
    "Fingerprint",
    "Summary",
    "Verdict",
    "baseline_path",
    "compare",
    "find_baseline",
    "format_seconds",
    "git_commit",
    "load_baseline",
    "machine_fingerprint",
    "plot_comparison",
    "plot_curves",
    "store_baseline",
    "summary",
]
