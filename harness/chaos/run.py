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

import collections
import contextlib
import dataclasses
import json
import math
import os
import random
import time
from collections.abc import Iterator
from typing import Any

from harness.backends import LoadedBackend, load_backend
from harness.chaos.model import Violation
from harness.contract import ExecutorConfig
from harness.system.growth import JUDGED_FROM_CALLS
from harness.system.load import load_per_cpu, load_scale, start_up_scale


class TimeUp(KeyboardInterrupt):
    """The run's time is up: Hypothesis re-raises a KeyboardInterrupt at once,
    without shrinking or replaying, so it ends the schedule where it stands."""


@dataclasses.dataclass
class Stats:
    examples: int = 0
    #: Examples run while shrinking a violation, and the seconds they took.
    shrink_examples: int = 0
    operations: int = 0
    calls: int = 0
    executors: int = 0
    faults: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    largest_wait: float = 0.0
    #: Waits that kept SPEC's bound only by its stretch with the load (every model's, shared).
    stretched: list[str] = dataclasses.field(default_factory=list)
    #: Operations done, by kind.
    done: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    #: Seconds spent per operation (and in starting and shutting down executors).
    spent: collections.defaultdict[str, float] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(float)
    )

    def fault(self, kind: str) -> None:
        self.faults[kind] += 1

    def waited(self, seconds: float) -> None:
        self.largest_wait = max(self.largest_wait, seconds)


@dataclasses.dataclass
class Finding:
    clause: str
    message: str
    operations: list[str]
    found_after_s: float
    #: The machine's rules with their arguments: what a replay runs.
    steps: list[tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=list)
    #: How the shrunk steps fared when replayed: "failed again", or why not.
    replayed: str = ""
    #: The schedule's operation it was found at (1 is the first; the soak's: the
    #: schedule's last), what ``--operations`` replays up to.
    at_operation: int = 0

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["steps"] = [[name, dict(kwargs)] for name, kwargs in self.steps]
        return out


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


class Run:
    """One chaos run's settings and what it has seen so far; the machine's rules call back into it."""

    def __init__(
        self,
        loaded: LoadedBackend,
        config: ExecutorConfig,
        duration_s: float,
        seed: int,
        soak_share: float,
        shrink_s: float,
        operations: int | None = None,
    ) -> None:
        self.loaded = loaded
        self.config = config
        self.name = "".join(c if c.isalnum() else "_" for c in loaded.name)
        self.seed = seed
        self.stats = Stats()
        self.started = time.monotonic()
        self.schedule_s = duration_s * (1.0 - soak_share)
        #: The schedule's budget of operations; None: its share of the duration.
        self.operations = operations
        #: Seconds that executor start-ups took: the run's time is its operations'.
        self.starts_s = 0.0
        self.shrink_s = shrink_s
        self.first_found: float | None = None
        self.findings: list[Finding] = []
        self.shrink_stopped = False
        self.replaying = False

    @property
    def schedule_ends(self) -> float:
        """When the schedule's operations have had their time: a start that a
        loaded machine makes slow does not eat it (CI once got 9 faults where
        its test asks for 10: 147 s of a 180 s schedule went to 7 starts)."""
        return self.started + self.schedule_s + self.starts_s

    def set_up(self) -> None:
        """The run's set-up is over (the backend's session: ray's cluster; the
        preload): a start-up too, so what it took is not the schedule's (CI: a
        ray run's cluster start at 18 runnable per CPU took its whole 150 s, and
        it ran no example)."""
        self.starts_s += time.monotonic() - self.started

    def schedules(self, clause: str) -> bool:
        """Whether operations that exercise ``clause`` are in the schedule (not declared unsupported)."""
        return self.loaded.declared(clause) is None

    def tick(self) -> None:
        """Before each operation: ends the schedule once its time (or its budget of
        operations) is up, or once it found a violation (shrinking it is
        ``shrink``'s, outside Hypothesis)."""
        if self.replaying:
            return
        if self.first_found is not None:
            raise TimeUp()
        if self.operations is not None:
            if self.stats.operations >= self.operations:
                raise TimeUp()
        elif time.monotonic() > self.schedule_ends:
            raise TimeUp()

    def found(self, violation: Violation, log: list[str], steps: list[tuple[str, dict[str, Any]]]) -> None:
        if self.replaying or getattr(violation, "recorded", False):
            return
        now = time.monotonic()
        if self.first_found is None:
            self.first_found = now
        violation.recorded = True  # type: ignore[attr-defined]
        self.findings.append(
            Finding(
                violation.clause,
                violation.message,
                list(log),
                now - self.started,
                list(steps),
                at_operation=self.stats.operations,
            )
        )

    def start_executor(self) -> Any:
        from harness.chaos.machine import attempt

        self.stats.executors += 1
        bound = self.config.init_timeout_s * start_up_scale()
        # The backend's own start-up bound stretches too: a start slowed by the load is
        # no C10 violation (CI: 'could not initialise torch.distributed within
        # init_timeout_s=120 s' at 42.8 runnable per CPU).
        config = dataclasses.replace(self.config, init_timeout_s=bound)
        outcome = attempt(lambda: self.loaded.factory(config), bound + 30, "start an executor")
        self.starts_s += outcome.seconds  # not the schedule's (schedule_ends)
        if outcome.hung or outcome.error is not None:
            raise Violation(
                "C10",
                f"a new executor with the same config could not be created: {outcome.describe()}",
            )
        return outcome.value

    def worker_pids(self, executor: Any) -> list[int | None]:
        from harness.chaos.machine import attempt, pids_in_sight
        from harness.conformance import probes

        outcome = attempt(lambda: executor.collective_rpc(probes.process), 60 * load_scale(), "collective_rpc(process)")
        if outcome.hung or outcome.error is not None or not isinstance(outcome.value, list):
            raise Violation("C14", f"collective_rpc(process) to find the ranks' processes: {outcome.describe()}")
        return pids_in_sight(outcome.value)

    def shrink(self, machine_class: Any, finding: Finding) -> Finding:
        """The finding's steps cut down, a chunk at a time (delta debugging), while a
        replay still breaks the same clause; within ``shrink_s`` seconds.

        Not Hypothesis's own shrinker: its replays of a 22-step example (stalls,
        restarts) took 2 s each on this 2-core machine, and 15 of them in 60 s
        had not shortened it by one step (measured); cutting whole chunks of steps
        shortens it in a few replays, each shorter than the last."""
        from harness.chaos.machine import replay

        self.replaying = True
        deadline = time.monotonic() + self.shrink_s
        best = finding

        def still_fails(candidate: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]] | None:
            nonlocal best
            violation, log, ran = replay(machine_class, candidate)
            self.stats.shrink_examples += 1
            if violation is None or violation.clause != finding.clause:
                return None
            kept = candidate[: ran + 1]
            best = Finding(
                violation.clause,
                violation.message,
                log,
                finding.found_after_s,
                kept,
                "failed again",
                finding.at_operation,
            )
            return kept

        try:
            steps = still_fails(list(finding.steps))
            if steps is None:
                finding.replayed = "did not fail again when replayed (an outcome that depends on timing)"
                return finding
            chunks = 2
            while len(steps) > 1:
                size = max(len(steps) // chunks, 1)
                for start in range(0, len(steps), size):
                    if time.monotonic() > deadline:
                        self.shrink_stopped = True
                        return best
                    shorter = still_fails(steps[:start] + steps[start + size :])
                    if shorter is not None:
                        steps = shorter
                        chunks = max(chunks - 1, 2)
                        break
                else:
                    if size == 1:
                        break
                    chunks = min(chunks * 2, len(steps))
            return best
        finally:
            self.replaying = False


@contextlib.contextmanager
def _session(loaded: LoadedBackend) -> Iterator[None]:
    """The backend's shared resources for the run (ray: its cluster), their environment set."""
    if loaded.session is None:
        yield
        return
    saved = dict(os.environ)
    with loaded.session() as env:
        os.environ.update(env)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


def _preload(loaded: LoadedBackend) -> None:
    """Import torch.distributed and what the backend preloads, once, here: a worker
    forked from this process then has them, where each would import torch again
    (an mp start took 3.5 s on a loaded 2-core machine, 0.1 s after; measured).
    This process runs no torch op, so no thread pool is forked half-made."""
    import importlib
    import importlib.util

    for name in ("torch.distributed", *loaded.preload):
        try:
            if importlib.util.find_spec(name.split(".")[0]) is not None:
                importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that cannot load is the backend's to report, at its start
            continue


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
) -> ChaosReport:
    """A chaos run of ``backend``; see the module's docstring. ``declare``: clauses
    to treat as declared unsupported (their operations leave the schedule), as
    ``conform --declare`` does: a backend's known failures, set aside to look for new ones.
    ``operations``: the schedule runs that many operations, however long they take,
    instead of its share of ``duration_s`` (which the soak still gets)."""
    from hypothesis import HealthCheck, Phase, Verbosity, settings
    from hypothesis import seed as seeded
    from hypothesis.stateful import run_state_machine_as_test

    from harness.chaos import machine, soak

    loaded, method = check_arguments(
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
    _preload(loaded)
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
    with _session(loaded):
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
                machine.attempt(executor.shutdown, 30 * load_scale(), "shutdown() after the soak")
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
