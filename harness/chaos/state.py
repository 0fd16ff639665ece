"""One chaos run's state: its settings, its clock, its counts (``Stats``) and
what it found (``Finding``), and the replay that shrinks a finding.

``Run`` is what the schedule's rules (``machine.py``) call back into: before
each operation (``tick``: is the run's time or budget of operations spent?),
when one breaks the contract (``found``), to start an executor and find its
ranks' processes. ``run.py`` makes one per run and reads it afterwards.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any

from harness.backends import LoadedBackend
from harness.chaos.bounded import attempt
from harness.chaos.model import Violation
from harness.conformance import probes
from harness.contract import ExecutorConfig
from harness.system.load import load_scale, start_up_scale
from harness.system.pids import visible

__all__ = ["Finding", "Run", "Stats", "TimeUp", "pids_in_sight", "replay"]


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


def replay(machine_class: Any, steps: list[tuple[str, dict[str, Any]]]) -> tuple[Violation | None, list[str], int]:
    """Run ``steps`` again on a fresh machine, outside Hypothesis: the violation they
    meet (None if none), the operations done, and how many of the steps ran before it.
    A step whose precondition no longer holds (a read with no future left) is passed
    over, as Hypothesis would."""
    machine = machine_class()
    violation: Violation | None = None
    ran = 0
    try:
        machine.start()
        for name, kwargs in steps:
            guard = machine_class.guards.get(name)
            if guard is None or guard(machine):
                getattr(machine, name)(**kwargs)
            ran += 1
    except Violation as found:
        violation = found
    finally:
        try:
            machine.teardown()
        except Violation as found:
            violation = violation or found
            ran = len(steps)
    return violation, list(machine.log), ran


def pids_in_sight(reported: list[Any]) -> list[int | None]:
    """Each rank's pid as this process sees it (None: on a machine out of sight)."""
    return [visible(int(pid), int(namespace)) for pid, namespace in reported]
