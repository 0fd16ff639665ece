"""A/B runs: two sides measured in one run, round by round, judged by ``stats.compare``.

For noisy, shared machines (CI): what the machine does during the run falls on
both sides alike, so a difference between them is the sides'. A gate fails
when B is significantly slower than A on any metric of the caller's side the
workload measures (``Workload.judged``: the engine step's time and the
caller's CPU per step), or on the one metric named (``gate``); the chance of
flagging identical sides stays at ``alpha`` over all of them
(``stats.split_alpha``). Only one side is
alive while a batch is measured, so what a side does beside its calls (a
spinning thread) falls on that side alone::

    round r:  start A ─► warm up, measure a batch ─► shut A down
              start B ─► warm up, measure a batch ─► shut B down   (B first in odd rounds)
    rounds' medians of A and of B ─► stats.compare, metric by metric
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.perf.runner import SETTLE_S, Side, labels_for, open_side, run_rounds
from harness.perf.stats import ALPHA, MIN_SAMPLES, NO_CHANGE, SLOWER, Verdict, compare, fewest_samples, split_alpha
from harness.perf.workloads import Samples, Workload, judged_metrics, merge
from harness.system.load import load_per_cpu

__all__ = ["BUSY_LOAD", "ABResult", "run_ab"]

#: Load per CPU above which an A/B run says the machine was busy.
BUSY_LOAD = 1.0


@dataclass
class ABResult:
    workload: str
    world_size: int
    a: str
    b: str
    samples: dict[str, Samples]
    #: Metric -> B against A.
    verdicts: dict[str, Verdict]
    #: The metrics the verdict judges: B is slower when any of them is.
    gate: tuple[str, ...]
    #: The machine's load per CPU (1-minute average) when the run ended: above
    #: BUSY_LOAD, other work shared the cores, and the rounds' scatter may hide a change.
    load_per_cpu: float = 0.0

    def __post_init__(self) -> None:
        # One metric's name, as the gate was before a verdict judged several.
        if isinstance(self.gate, str):
            self.gate = (self.gate,)

    @property
    def slower(self) -> list[str]:
        """The judged metrics on which B is slower, in the workload's order."""
        return [metric for metric in self.gate if self.verdicts[metric].decision == SLOWER]

    @property
    def b_is_slower(self) -> bool:
        return bool(self.slower)

    def lines(self) -> list[str]:
        out = [f"{self.workload} ws={self.world_size}: B ({self.b}) against A ({self.a})"]
        for metric, v in self.verdicts.items():
            mark = "  <- gate" if metric in self.gate else ""
            out.append(f"  {v.decision:>9}  {v.message}{mark}")
        judged = [self.verdicts[metric].decision for metric in self.gate]
        if self.load_per_cpu > BUSY_LOAD and SLOWER not in judged and NO_CHANGE in judged:
            # CI once judged a call 1 ms late "no change" (interval -16 % to +69 %)
            # beside four other jobs: say so, rather than let it read as a clean bill.
            out.append(
                f"  the machine was busy (load {self.load_per_cpu:.1f} per CPU): other work shared the cores, "
                "so 'no change' may hide a change; measure on a quiet machine"
            )
        return out


def run_ab(
    a: Side,
    b: Side,
    make_workload: Callable[[], Workload],
    world_size: int,
    *,
    rounds: int = 40,
    reps: int | None = None,
    warmup: int = 10,
    gate: str | None = None,
    alpha: float = ALPHA,
    min_effect: float = 0.03,
    progress: Callable[[str], None] | None = None,
    settle_s: float = SETTLE_S,
) -> ABResult:
    """``rounds`` rounds; in each, both sides measured one after the other
    (order alternating), each on an executor of its own started for that
    round and shut down before the other side's starts: ``reps`` steps after
    ``warmup``. Every metric is judged B against A on the rounds' medians,
    not on single steps.

    Why one side alive at a time: a regression that lives beside the calls
    rather than in them (a thread spinning on a reply queue from the
    executor's creation to its shutdown, a busy monitor, a heartbeat) takes
    the cores and the GIL from whatever else runs in the process. With both
    sides' executors alive at once, it slowed A's batches as much as B's and
    cancelled out: the seed's regression read "no change".

    Why rounds, not steps: one executor's steps share its processes' placement
    and state, so two executors of the same backend differ by a few percent
    for the whole of their lives. Steps of one executor are not independent
    samples; a test over them calls that executor effect significant (3 false
    alarms in 20 A/B runs of ``mp`` against itself, measured). Each round
    starts new executors, so the executor effect is part of each round's
    noise, and the rounds are the independent samples the statistics assume.

    The workload is calibrated (``Workload.calibrate``) before the first
    executor starts, with nothing of either side running, and both sides
    get that calibration. ``settle_s``: the pause before each batch
    (``run_rounds``; 0 skips the wait for quiet CPUs too).

    What is judged: ``gate`` alone where one is named, else every metric of
    the caller's side (``Workload.judged``); B is slower when any of them is.
    ``alpha`` is the chance of flagging identical sides on any of them:
    every metric is judged at its share (``stats.split_alpha``), the ones
    reported but not judged too, so that each line reads on one scale."""
    la, lb = labels_for([a.text, b.text])
    w = make_workload()
    judged = judged_metrics(w, gate)
    each = split_alpha(alpha, len(judged))
    fewest = max(MIN_SAMPLES, fewest_samples(each))
    if rounds < fewest:
        # Refused before the first round: p < `each` is out of reach of fewer rounds.
        raise ValueError(
            f"{rounds} rounds: judging {', '.join(judged)} at p < {each:g} each needs at least {fewest} "
            "rounds (one median per side per round)"
        )
    kwargs: dict[str, Any] = {"reps": reps or w.default_reps, "warmup": warmup, "settle_s": settle_s}
    if progress is not None:
        kwargs["progress"] = progress
    w.calibrate()
    samples: dict[str, Samples] = {la: {}, lb: {}}
    per_round: dict[str, Samples] = {la: {}, lb: {}}
    sides = {la: a, lb: b}
    for r in range(rounds):
        for label in [la, lb] if r % 2 == 0 else [lb, la]:
            with open_side(sides[label], world_size) as ex:
                got = run_rounds({label: ex}, w, world_size, rounds=1, **kwargs)[label]
            merge(samples[label], got)
            merge(per_round[label], {m: [statistics.median(v)] for m, v in got.items() if v})
    verdicts = {
        metric: compare(
            per_round[la][metric],
            per_round[lb][metric],
            metric,
            f"A side: {a.text}",
            alpha=each,
            min_effect=min_effect,
        )
        for metric in w.metrics
        if len(per_round[la].get(metric, [])) >= MIN_SAMPLES and len(per_round[lb].get(metric, [])) >= MIN_SAMPLES
    }
    for metric in judged:
        if metric not in verdicts:
            raise ValueError(
                f"gate metric {metric!r} has {len(per_round[la].get(metric, []))} samples per side: "
                f"too few to judge (at least {MIN_SAMPLES}); run more rounds"
            )
    return ABResult(w.name, world_size, a.text, b.text, samples, verdicts, judged, load_per_cpu())
