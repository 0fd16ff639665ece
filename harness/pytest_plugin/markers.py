"""The plugin's markers: namespaced, so that a project's own ``gpu``, ``ray``,
``distributed`` or ``perf`` tests run as they would without harness installed.

The plugin acts only on tests that use its fixtures or carry a ``harness_*``
marker. To those tests alone it adds the plain names as selection aliases, so
that ``pytest -m gpu`` on a GPU runner and ``pytest -m "not gpu"`` on a laptop
keep selecting the suite's tiers::

    @pytest.mark.harness_gpu ──► the plugin skips it without GPUs ──► also marked gpu (for -m)
    @pytest.mark.gpu (a project's own) ──► untouched
"""

from __future__ import annotations

import pytest

GPU = "harness_gpu"
RAY = "harness_ray"
DISTRIBUTED = "harness_distributed"
PERF = "harness_perf"
#: Tests with this marker never run beside another (they measure CPU time or latency).
EXCLUSIVE = "harness_exclusive"
#: Tests with this marker run isolated (as backend tests do), side by side.
ISOLATED = "harness_isolated"
CLAUSE = "harness_clause"

#: The namespaced marker each plain selection alias stands for.
TIER_ALIASES = {GPU: "gpu", RAY: "ray", DISTRIBUTED: "distributed", PERF: "perf"}

MARKERS = (
    f"{GPU}(min_gpus=N): needs N CUDA GPUs (default: one per rank); skips with the count found",
    f"{DISTRIBUTED}: starts workers; runs once per backend, in its own process",
    f"{RAY}: needs Ray; skips with the install command where it is missing",
    f"{PERF}: compares latency with a stored baseline",
    f"{EXCLUSIVE}: runs with no other test beside it (it measures CPU time or latency)",
    f"{ISOLATED}: runs in a forked process of its own, side by side with others (a test that waits on "
    "subprocesses, not a backend test)",
    f"{CLAUSE}(*ids): the SPEC.md clauses this test checks",
    *(
        f"{alias}: selects harness's {namespaced} tests (-m {alias}); harness adds it to its own tests only"
        for namespaced, alias in TIER_ALIASES.items()
    ),
)


def add_tier_aliases(item: pytest.Item) -> None:
    """Give one of the plugin's own tests the plain marker of each tier it is
    in, for ``-m`` to select; its namespaced markers stay what the plugin reads."""
    for namespaced, alias in TIER_ALIASES.items():
        if item.get_closest_marker(namespaced) is not None and item.get_closest_marker(alias) is None:
            item.add_marker(alias)
