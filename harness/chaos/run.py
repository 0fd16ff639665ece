"""A chaos run: the seeded schedule (``machine.py``) for most of its time, then
the soak (``soak.py``), and what both found, printed.

    run_chaos(backend, world size, duration, seed[, operations])
      ├─ schedule: Hypothesis examples until (1 - soak share) of the duration,
      │   or, given ``operations``, until that many operations have run;
      │   the first violation stops generation, then shrinking (its own budget)
      └─ soak: one executor for the rest, growth per 1,000 calls
    ──► ChaosReport: operations, faults by kind, calls per second, the largest
        hang-free wait, growth, violations with their clause and shrunk operations

The same seed draws the same schedule (Hypothesis's, seeded; no example
database): ``python -m harness chaos … --seed K`` replays it. How far a run of
a given duration gets in it depends on the machine: a loaded one runs fewer
operations in the same seconds (CI: 242 in a schedule of 42 s where a quiet
machine ran 665 in 30 s, and missed a violation at operation 272). A budget of
operations (``--operations N``) runs the same operations on any machine, however
long they take; a finding's replay line names the operation it was found at,
so the replay stops there. Outcomes that depend on timing may still differ from
one run to the next: the report gives the shrunk operations, which reproduce a
finding by themselves.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from typing import Any

from harness.backends import LoadedBackend, load_backend, open_session
from harness.chaos.bounded import attempt
from harness.chaos.model import Violation
from harness.chaos.state import Finding, Run, Stats, TimeUp
from harness.contract import ExecutorConfig
from harness.system.growth import JUDGED_FROM_CALLS
from harness.system.load import load_per_cpu, load_scale


@dataclasses.dataclass
class ChaosReport:
    backend: str
    world_size: int
    start_method: str
    seed: int
    duration_s: float
    seconds: float = 0.0
    stats: Stats = dataclasses.field(default_factory=Stats)
    findings: list[Finding] = dataclasses.field(default_factory=list)
    soak: Any = None
    stretched: list[str] = dataclasses.field(default_factory=list)
    left_out: dict[str, str] = dataclasses.field(default_factory=dict)
    shrink_stopped: bool = False
    load_per_cpu: float = 0.0
    #: The clauses declared with --declare: their operations left the schedule (a replay must leave them out too).
    declared: list[str] = dataclasses.field(default_factory=list)

    #: The schedule's budget of operations (--operations), if it had one rather than its share of the duration.
    operations: int | None = None

    @property
    def replay(self) -> str:
        """The command that runs this schedule again: up to the finding's operation
        where there is one (a slower machine would not reach it in the same seconds)."""
        upto = self.findings[0].at_operation if self.findings and self.findings[0].at_operation else self.operations
        return (
            f"python -m harness chaos --backend {self.backend} --world-size {self.world_size} "
            f"--start-method {self.start_method} --duration {self.duration_s:g} --seed {self.seed}"
            + (f" --operations {upto}" if upto else "")
            + (f" --declare {','.join(self.declared)}" if self.declared else "")
        )

    def as_dict(self) -> dict[str, Any]:
        soak = self.soak
        return {
            "backend": self.backend,
            "world_size": self.world_size,
            "start_method": self.start_method,
            "seed": self.seed,
            "duration_s": self.duration_s,
            "operations_budget": self.operations,
            "seconds": round(self.seconds, 1),
            "examples": self.stats.examples,
            "shrink_examples": self.stats.shrink_examples,
            "operations": self.stats.operations,
            "calls": self.stats.calls,
            "calls_per_second": round(self.stats.calls / self.seconds, 1) if self.seconds else 0.0,
            "executors": self.stats.executors,
            "faults": dict(self.stats.faults),
            "largest_wait_s": round(self.stats.largest_wait, 2),
            "operations_by_kind": dict(self.stats.done.most_common()),
            "seconds_by_operation": {
                k: round(v, 1) for k, v in sorted(self.stats.spent.items(), key=lambda kv: -kv[1])
            },
            "findings": [f.as_dict() for f in self.findings],
            "soak": None
            if soak is None
            else {
                "calls": soak.calls,
                "seconds": round(soak.seconds, 1),
                "judged": soak.judged,
                "growth": [dataclasses.asdict(g) for g in soak.growth],
            },
            "stretched": self.stretched,
            "left_out": self.left_out,
            "shrink_stopped": self.shrink_stopped,
            "load_per_cpu": round(self.load_per_cpu, 2),
            "declared": self.declared,
            "replay": self.replay,
        }


def check_arguments(
    backend: str,
    world_size: int,
    duration_s: float,
    start_method: str | None = None,
    soak_share: float = 0.3,
    shrink_s: float | None = None,
    where: str = "the command line",
    declare: dict[str, str] | None = None,
    operations: int | None = None,
) -> tuple[LoadedBackend, str]:
    """The backend loaded and the start method a run of these arguments uses;
    ValueError (or the loader's ImportError or TypeError) naming the value and
    ``where`` it came from. Apart from the run, so that a command line tells bad
    input (a usage error) from a run that failed."""
    loaded = load_backend(backend, extra_unsupported=declare, where=where)
    if not loaded.supports_world_size(world_size):
        raise ValueError(
            f"--world-size {world_size} from {where}: backend {backend!r} supports world sizes {loaded.world_sizes}"
        )
    # The bounds (and words) of the command line's own argument types (harness/__main__.py).
    if not 0.0 <= soak_share < 1.0:
        raise ValueError(f"--soak-share {soak_share:g} from {where}: expected a number >= 0 and < 1")
    if not 0.0 < duration_s < math.inf:
        raise ValueError(f"--duration {duration_s:g} from {where}: expected a number of seconds > 0")
    if shrink_s is not None and not 0.0 <= shrink_s < math.inf:
        raise ValueError(f"--shrink-time {shrink_s:g} from {where}: expected a number of seconds >= 0")
    if operations is not None and operations < 1:
        raise ValueError(f"--operations {operations} from {where}: expected an integer >= 1")
    method = start_method or (loaded.start_methods[0] if loaded.start_methods else "spawn")
    if loaded.start_methods is not None and method not in loaded.start_methods:
        raise ValueError(
            f"--start-method {method!r} from {where}: backend {backend!r} supports {', '.join(loaded.start_methods)}"
        )
    return loaded, method


def run_chaos(
    backend: str,
    world_size: int,
    duration_s: float,
    seed: int,
    start_method: str | None = None,
    soak_share: float = 0.3,
    shrink_s: float | None = None,
    where: str = "the command line",
    declare: dict[str, str] | None = None,
    operations: int | None = None,
    checked: tuple[LoadedBackend, str] | None = None,
) -> ChaosReport:
    """A chaos run of ``backend``; see the module's docstring. ``declare``: clauses
    to treat as declared unsupported (their operations leave the schedule), as
    ``conform --declare`` does: a backend's known failures, set aside to look for new ones.
    ``operations``: the schedule runs that many operations, however long they take,
    instead of its share of ``duration_s`` (which the soak still gets).
    ``checked``: what ``check_arguments`` gave for these arguments, where the
    caller checked them first (the command line: bad input is a usage error);
    else they are checked here."""
    from hypothesis import HealthCheck, Phase, Verbosity, settings
    from hypothesis import seed as seeded
    from hypothesis.stateful import run_state_machine_as_test

    from harness.chaos import machine, soak

    loaded, method = checked or check_arguments(
        backend, world_size, duration_s, start_method, soak_share, shrink_s, where, declare, operations
    )
    config = ExecutorConfig(world_size=world_size, start_method=method)
    run = Run(
        loaded,
        config,
        duration_s,
        seed,
        soak_share,
        shrink_s if shrink_s is not None else max(60.0, duration_s / 2),
        operations,
    )
    report = ChaosReport(backend, world_size, method, seed, duration_s, operations=operations)
    report.declared = sorted(declare or {}, key=lambda c: int(c[1:]) if c[1:].isdigit() else 0)
    report.left_out = {
        operation: f"{clause} declared unsupported: {loaded.declared(clause)}"
        for operation, clause in (
            ("worker exceptions", "C6"),
            ("timeouts and long stalls", "C7"),
            ("worker kills", "C8"),
            ("calls from several threads at once", "C24"),
            ("unpicklable arguments and results", "C20"),
            ("unique_reply_rank out of range", "C2"),
        )
        if loaded.declared(clause) is not None
    }
    chaos = machine.machine_for(run)
    chaos = seeded(seed)(chaos)
    options = settings(
        max_examples=10**6,
        stateful_step_count=machine.STEPS,
        deadline=None,
        database=None,
        # Shrinking is Run.shrink's (its docstring says why).
        phases=[Phase.generate],
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
    )
    with open_session(loaded):
        run.set_up()
        try:
            run_state_machine_as_test(chaos, settings=options)
        except TimeUp:
            pass
        except Violation:
            pass  # recorded by the machine as it was raised
        except Exception:
            if not run.findings:
                raise
        if run.findings:
            run.findings = [run.shrink(chaos, run.findings[0])]
        if not run.findings and soak_share > 0:
            # The soak gets what the duration has left once start-ups are not
            # counted: the schedule's own end moved by them (Run.start_executor).
            # After a budget of operations, its own share of the duration.
            if operations is not None:
                rest = duration_s * soak_share
            else:
                rest = max(duration_s - (time.monotonic() - run.started - run.starts_s), 1.0)
            executor = run.start_executor()
            try:
                pids = run.worker_pids(executor)
                report.soak = soak.soak(executor, pids, rest, random.Random(seed), run.stats)
            except Violation as violation:
                run.found(violation, ["soak: plain calls on one executor"], [])
            finally:
                attempt(executor.shutdown, 30 * load_scale(), "shutdown() after the soak")
    report.seconds = time.monotonic() - run.started
    report.stats = run.stats
    report.findings = run.findings[:1]
    report.shrink_stopped = run.shrink_stopped
    report.stretched += run.stats.stretched
    report.load_per_cpu = load_per_cpu()
    return report


def render(report: ChaosReport) -> str:
    """The report as text: the figures, then the finding with its operations."""
    d = report.as_dict()
    lines = [
        f"chaos: {report.backend} ws{report.world_size} ({report.start_method}), seed {report.seed}, "
        f"{d['seconds']:g} s of {report.duration_s:g} s"
        + (f" (the schedule: {report.operations} operations)" if report.operations else ""),
        f"  examples {d['examples']}, operations {d['operations']}, calls {d['calls']} "
        f"({d['calls_per_second']:g} per second), executors started {d['executors']}",
        "  faults injected: " + (", ".join(f"{kind} {n}" for kind, n in sorted(report.stats.faults.items())) or "none"),
        f"  largest hang-free wait: {d['largest_wait_s']:g} s",
        "  operations by kind: " + ", ".join(f"{k} {v}" for k, v in d["operations_by_kind"].items()),
        "  seconds by operation: " + ", ".join(f"{k} {v:g}" for k, v in d["seconds_by_operation"].items()),
    ]
    for operation, why in report.left_out.items():
        lines.append(f"  left out of the schedule: {operation} ({why})")
    if report.soak is not None:
        s = report.soak
        judged = (
            "judged"
            if s.judged
            else f"NOT judged, C10 not checked: fewer than {JUDGED_FROM_CALLS} calls after the warm-up"
        )
        lines.append(f"  soak: {s.calls} calls in {s.seconds:.0f} s, growth per 1,000 calls ({judged}):")
        lines += [f"    {g.describe()}" + ("  <- over" if g.over else "") for g in s.growth]
    if report.stretched:
        lines.append(f"  on a loaded machine (load per CPU {report.load_per_cpu:.1f}):")
        lines += [f"    {s}" for s in report.stretched]
    if report.findings:
        f = report.findings[0]
        lines.append(
            f"VIOLATION of {f.clause} (found after {f.found_after_s:.0f} s, at operation {f.at_operation}): {f.message}"
        )
        stopped = " (shrinking stopped at its time budget)" if report.shrink_stopped else ""
        if f.replayed:
            stopped += f"; replayed: {f.replayed}"
        shrunk = f"shrunk to {len(f.operations)} in {d['shrink_examples']} replays"
        lines.append(f"  the operations that led to it, {shrunk}{stopped}:")
        lines += [f"    {i}. {op}" for i, op in enumerate(f.operations, 1)]
        lines.append(f"  replay: {report.replay}")
    else:
        lines.append("no violation")
    return "\n".join(lines)


def write_json(report: ChaosReport, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report.as_dict(), f, indent=2)
