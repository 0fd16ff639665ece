"""A/B runs: two sides measured in one run, interleaved, judged by ``stats.compare``.

For noisy, shared machines (CI): what the machine does during the run falls on
both sides alike, so a difference between them is the sides'. A gate fails
when B is significantly slower than A on the chosen workload's headline metric
(``--benchmark-compare-fail`` in pytest-benchmark's terms).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.perf.runner import Side, labels_for, open_side, run_rounds
from harness.perf.stats import SLOWER, Verdict, compare
from harness.perf.workloads import Samples, Workload

__all__ = ["ABResult", "run_ab"]


@dataclass
class ABResult:
    workload: str
    world_size: int
    a: str
    b: str
    samples: dict[str, Samples]
    #: Metric -> B against A.
    verdicts: dict[str, Verdict]
    #: The metric the gate judges.
    gate: str

    @property
    def b_is_slower(self) -> bool:
        return self.verdicts[self.gate].decision == SLOWER

    def lines(self) -> list[str]:
        out = [f"{self.workload} ws={self.world_size}: B ({self.b}) against A ({self.a})"]
        for metric, v in self.verdicts.items():
            mark = "  <- gate" if metric == self.gate else ""
            out.append(f"  {v.decision:>9}  {v.message}{mark}")
        return out


def run_ab(
    a: Side,
    b: Side,
    make_workload: Callable[[], Workload],
    world_size: int,
    *,
    rounds: int = 10,
    reps: int = 50,
    warmup: int = 20,
    gate: str | None = None,
    alpha: float = 0.01,
    min_effect: float = 0.03,
    progress: Callable[[str], None] | None = None,
) -> ABResult:
    """Both sides' executors at once, ``rounds`` alternating batches of
    ``reps`` steps each, every metric judged B against A."""
    la, lb = labels_for([a.text, b.text])
    w = make_workload()
    gate = gate or w.metrics[0]
    if gate not in w.metrics:
        raise ValueError(f"gate metric {gate!r}: workload {w.name!r} measures {', '.join(w.metrics)}")
    with contextlib.ExitStack() as stack:
        ex_a = stack.enter_context(open_side(a, world_size))
        ex_b = stack.enter_context(open_side(b, world_size))
        kwargs: dict[str, Any] = {"rounds": rounds, "reps": reps, "warmup": warmup}
        if progress is not None:
            kwargs["progress"] = progress
        samples = run_rounds({la: ex_a, lb: ex_b}, w, world_size, **kwargs)
    verdicts = {
        metric: compare(
            samples[la][metric],
            samples[lb][metric],
            metric,
            f"A side: {a.text}",
            alpha=alpha,
            min_effect=min_effect,
        )
        for metric in w.metrics
        if len(samples[la].get(metric, [])) >= 5 and len(samples[lb].get(metric, [])) >= 5
    }
    if gate not in verdicts:
        raise ValueError(
            f"gate metric {gate!r} has {len(samples[la].get(gate, []))} samples per side: "
            "too few to judge; run more rounds"
        )
    return ABResult(w.name, world_size, a.text, b.text, samples, verdicts, gate)
