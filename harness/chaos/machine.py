"""The chaos schedule: a Hypothesis state machine whose rules are operations on
an executor, judged by the model (``model.py``) as they happen.

One example is one life of a few executors: started, driven through up to
``STEPS`` random operations (calls blocking and not, replies read in random
order on other threads, timeouts that fire, worker errors, unpicklable
arguments and results, ranks out of range, worker SIGKILL idle, mid-call and
mid-collective, workers stalled by SIGSTOP for less and for more than a call's
timeout, shutdown and a new executor), then shut down. Hypothesis draws the
operations from the run's seed and, once one breaks the contract, shrinks the
example to the shortest sequence that still does::

    Hypothesis ──► rule (operation) ──► executor ──► Outcome ──► Model ──► Violation(Cn)
        ▲                                                                  │
        └──────────────── shrink: fewer, simpler operations ◄──────────────┘

An operation whose clause the backend declares unsupported is left out of the
schedule (C7: no timeouts, C8: no kills, C24: no callers on several threads).
Every wait runs on a watchdog thread, bounded: nothing a backend does can hang
the run (a hung call is a finding, and its thread is left behind, a daemon).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.chaos.bounded import attempt, attempt_on_thread
from harness.chaos.model import HANG_S, SHUTDOWN_BOUND_S, Echo, Model, Outcome, Violation
from harness.conformance import probes
from harness.system.load import load_scale
from harness.system.processes import is_zombie

if TYPE_CHECKING:
    from harness.chaos.state import Run

#: Operations per example (Hypothesis may stop earlier, and shrinks to fewer).
STEPS = 24
#: At most this many futures unread at once.
MAX_PENDING = 24
#: Executors per example, and calls that time out or stall per example: each costs seconds,
#: and Hypothesis's swarm of rules may pick one over and over.
MAX_LIVES = 3
MAX_TIMEOUTS = 4
#: A call's timeout when it is meant to fire, and how much longer the workers take.
FIRING_TIMEOUT_S = 0.3
SLOWER_BY_S = 0.7
#: A stall shorter than a call's timeout, and that call's timeout.
SHORT_STALL_S = 0.2
SHORT_STALL_TIMEOUT_S = 10.0

# Payload sizes: mostly small, some of a MiB, a few of tens of MiB. Hypothesis
# shrinks toward the first.
SIZES = (0, 1, 100, 4096, 65536, 1 << 20, 16 << 20)
#: Calls from several threads at once stay small: each thread's copy costs the cores.
THREAD_SIZES = (0, 100, 65536)


class Pending:
    """A future not read yet: its call, its order of submission, and the model's
    epoch (faults so far) when it was submitted."""

    def __init__(self, call: Echo, future: Any, seq: int, epoch: int) -> None:
        self.call, self.future, self.seq, self.epoch = call, future, seq, epoch


def _recorded(fn: Callable[..., None]) -> Callable[..., None]:
    """A rule: counted, stopped when the run's time is up, its violation recorded
    with the operations that led to it."""

    @functools.wraps(fn)
    def rule_body(self: Any, **kwargs: Any) -> None:
        self.run.tick()
        self.run.stats.operations += 1
        self.steps.append((fn.__name__, dict(kwargs)))
        start = time.monotonic()
        try:
            fn(self, **kwargs)
        except Violation as violation:
            self.run.found(violation, self.log, self.steps)
            raise
        finally:
            self.run.stats.spent[fn.__name__] += time.monotonic() - start
            self.run.stats.done[fn.__name__] += 1

    return rule_body


class _Operations:
    """The schedule's operations on an executor and their judgement, without
    Hypothesis's rules: ``machine_for`` makes a run's class of them, with the
    strategies of its world size and the preconditions of what it declares. The
    run is the class's ``chaos_run``."""

    chaos_run: Run

    def __init__(self) -> None:
        super().__init__()
        self.run: Run = self.chaos_run
        self.ws = self.run.config.world_size
        self.log: list[str] = []
        #: The rules run, with their arguments: what a replay runs again.
        self.steps: list[tuple[str, dict[str, Any]]] = []
        self.executor: Any = None
        self.model = Model(self.ws, stretched=self.run.stats.stretched)
        self.pending: list[Pending] = []
        self.pids: list[int | None] = []
        self.lives = 0
        self.timeouts = 0
        self.seq = 0
        #: Where the ranks leave their markers inside a collective (made when first needed).
        self.marker_root: str | None = None

    # ---- the executor's life --------------------------------------------------

    def start(self) -> None:
        self.run.tick()
        self.run.stats.examples += 1
        start = time.monotonic()
        self._start()
        self.run.stats.spent["start"] += time.monotonic() - start

    def _start(self) -> None:
        self.lives += 1
        self.model = Model(self.ws, stretched=self.run.stats.stretched)
        self.pending = []
        model = self.model
        self.log.append(f"executor {self.lives}: start")
        self.executor = self.run.start_executor()
        self.executor.register_failure_callback(lambda: model.callbacks.append(time.monotonic()))
        self.pids = self.run.worker_pids(self.executor)

    def _note(self, text: str) -> str:
        self.log.append(text)
        return f"operation {len(self.log)} ({text})"

    def _token(self) -> str:
        self.seq += 1
        return f"x{self.lives}.{self.seq}"

    def _bound(self) -> float:
        return self.model.death_left() if self.model.died_at is not None else HANG_S * load_scale()

    def _call(self, call: Echo, **kw: Any) -> Any:
        self.run.stats.calls += 1
        return self.executor.collective_rpc(
            probes.echo,
            args=(call.token, call.data),
            kwargs={"token": call.token},
            unique_reply_rank=call.narrowed,
            **kw,
        )

    def _through_the_future(self, method: Any, non_block: bool, **kw: Any) -> Callable[[], Any]:
        """A call of ``method``: its outcome, through its future's result() where non_block."""

        def go() -> Any:
            out = self.executor.collective_rpc(method, non_block=non_block, **kw)
            return out.result() if non_block else out

        return go

    def _wait(self, fn: Callable[[], Any], what: str, bound: float | None = None) -> Outcome:
        outcome = attempt(fn, self._bound() if bound is None else bound, what)
        if not outcome.hung:
            self.run.stats.waited(outcome.seconds)
        return outcome

    def _apart(self) -> list[int]:
        """The ranks with a process of their own, in sight here: the ones a fault can hit."""
        return [r for r, pid in enumerate(self.pids) if pid is not None and pid != os.getpid()]

    # ---- calls ---------------------------------------------------------------------

    def call(self, nbytes: int, narrowed: int | None) -> None:
        """A blocking call: its own result (C1, C2, C3, C17)."""
        echo = Echo(self._token(), nbytes, narrowed)
        what = self._note(f"call: {echo.describe()}")
        self.model.judge_echo(echo, self._wait(lambda: self._call(echo), what), what)

    def submit(self, nbytes: int, narrowed: int | None, count: int, read_now: int | None) -> None:
        """``count`` non_block calls in a row: one future each (C4), read later, or
        one of them (``read_now``-th from the last) read at once."""
        for _ in range(count):
            self._submit(Echo(self._token(), nbytes, narrowed))
        if read_now is not None and self.pending:
            mine = self.pending.pop(max(len(self.pending) - 1 - read_now, 0))
            self._read(mine, self._note(f"read the future of {mine.call.token}"))

    def _submit(self, echo: Echo) -> None:
        what = self._note(f"submit: {echo.describe()}")
        outcome = self._wait(lambda: self._call(echo, non_block=True), what)
        if outcome.hung or outcome.error is not None:
            if self.model.died_at is not None:
                self.model.judge_dead_call(outcome, what)
                return
            self.model.judge_echo(echo, outcome, what)
            return
        future = outcome.value
        if isinstance(future, list) or not callable(getattr(future, "result", None)):
            raise Violation("C4", f"{what}: non_block=True returned {type(future).__name__}, not one future")
        self.pending.append(Pending(echo, future, self.seq, self.model.epoch))

    def read(self, pick: int, elsewhere: bool) -> None:
        """result() of a future picked at random, on this thread or another (unless
        C24 is declared: a backend may read its replies inside result()): its own
        call's result, and every earlier future complete with it (C5)."""
        mine = self.pending.pop(pick % len(self.pending))
        elsewhere = elsewhere and self.run.schedules("C24")
        what = self._note(f"read the future of {mine.call.token}" + (" on another thread" if elsewhere else ""))
        self._read(mine, what, elsewhere)

    def _read(self, mine: Pending, what: str, elsewhere: bool = False) -> None:
        if elsewhere:
            outcome = attempt_on_thread(mine.future.result, self._bound(), what)
            if not outcome.hung:
                self.run.stats.waited(outcome.seconds)
        else:
            outcome = self._wait(mine.future.result, what)
        before_fault = mine.epoch < self.model.epoch
        self.model.judge_echo(mine.call, outcome, what, pending=before_fault)
        if outcome.hung:
            return
        earlier = [p.call.token for p in self.pending if p.seq < mine.seq and not p.future.done()]
        if earlier:
            raise Violation(
                "C5",
                f"{what}: it completed while the earlier futures of {', '.join(earlier)} are still pending: "
                "futures complete in submission order",
            )

    def from_threads(self, threads: int, nbytes: int) -> None:
        """Blocking calls from several threads at once: each its own result (C24)."""
        echoes = [Echo(self._token(), nbytes) for _ in range(threads)]
        what = self._note(f"calls from {threads} threads at once: {', '.join(e.token for e in echoes)}")
        outcomes: list[Outcome] = [Outcome(hung=True) for _ in echoes]
        bound = self._bound()

        def caller(i: int) -> None:
            outcomes[i] = attempt(lambda: self._call(echoes[i]), bound, what)

        callers = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(threads)]
        for thread in callers:
            thread.start()
        for thread in callers:
            thread.join(bound + 5)
        for echo, outcome in zip(echoes, outcomes, strict=True):
            if outcome.hung:
                raise Violation("C24", f"{what}: the call {echo.token} {outcome.describe()}")
            self.model.judge_echo(echo, outcome, f"{what}, call {echo.token}")

    # ---- errors the caller or a worker makes --------------------------------------

    def timeout_fires(self, non_block: bool) -> None:
        """A call whose workers take longer than its timeout: TimeoutError within t + 2 s (C7)."""
        t = FIRING_TIMEOUT_S
        what = self._note(f"{'submit' if non_block else 'call'}: sleep {t + SLOWER_BY_S:g} s with timeout={t:g}")
        self.run.stats.fault("timeout")
        self.timeouts += 1
        self.run.stats.calls += 1
        go = self._through_the_future(probes.sleep, non_block, timeout=t, args=(t + SLOWER_BY_S,))
        outcome = self._wait(go, what, bound=self._timeout_bound(t))
        self.model.judge_timeout(outcome, t, what)

    def _timeout_bound(self, t: float) -> float:
        if self.model.died_at is not None:
            return self.model.death_left()
        return (t + 2.0) * load_scale() + SLOWER_BY_S + 5.0

    def worker_raises(self, rank: int, non_block: bool) -> None:
        """A call that raises on one rank: an error carrying its message; the next call works (C6)."""
        message = f"chaos error {self._token()} on rank {rank}"
        what = self._note(f"{'submit' if non_block else 'call'}: raise on rank {rank}")
        self.run.stats.fault("worker error")
        self.run.stats.calls += 1

        go = self._through_the_future(probes.raise_on_rank, non_block, args=(rank, message))
        self.model.judge_worker_error(self._wait(go, what), message, what)

    def unpicklable_argument(self, non_block: bool) -> None:
        """An argument pickle refuses: collective_rpc itself raises, in the caller (C20)."""
        what = self._note(f"{'submit' if non_block else 'call'}: an unpicklable argument (a lock)")
        self.run.stats.fault("unpicklable argument")
        lock = threading.Lock()
        outcome = self._wait(lambda: self.executor.collective_rpc(probes.echo, args=(lock,), non_block=non_block), what)
        self.model.judge_refused(outcome, (Exception,), "C20", what)

    def unpicklable_result(self, non_block: bool) -> None:
        """A result pickle refuses: an error, and the executor still works (C20)."""
        what = self._note(f"{'submit' if non_block else 'call'}: a result that cannot be pickled")
        self.run.stats.fault("unpicklable result")
        self.run.stats.calls += 1

        go = self._through_the_future(probes.unpicklable_result, non_block)
        self.model.judge_failed_call(self._wait(go, what), "C20", what)

    def rank_out_of_range(self, non_block: bool) -> None:
        """unique_reply_rank=world_size: ValueError from collective_rpc itself (C2)."""
        what = self._note(f"{'submit' if non_block else 'call'}: unique_reply_rank={self.ws}, out of range")
        outcome = self._wait(
            lambda: self.executor.collective_rpc(probes.rank, unique_reply_rank=self.ws, non_block=non_block), what
        )
        self.model.judge_refused(outcome, (ValueError,), "C2", what)

    def check_health(self) -> None:
        """check_health(): returns while every worker lives, raises after a death (C8)."""
        what = self._note("check_health()")
        if self.model.died_at is not None:
            self._health_after_death(what)
            return
        outcome = self._wait(self.executor.check_health, what)
        if outcome.hung or (outcome.error is not None and self.model.failing is None):
            raise Violation("C8", f"{what}: {outcome.describe()} though no worker died")

    # ---- faults on workers ------------------------------------------------------------

    # One rule per moment of the death, not one rule with the moment as an argument:
    # each is then as likely as any other operation (Hypothesis picks among rules).
    def can_kill(self) -> bool:
        """A worker can be killed: C8 is scheduled, none died yet, and one has a process apart from this one."""
        return self.run.schedules("C8") and self.model.died_at is None and bool(self._apart())

    def kill_idle(self, pick: int) -> None:
        """SIGKILL an idle worker (C8)."""
        self._kill("idle", pick)

    def kill_mid_call(self, pick: int) -> None:
        """SIGKILL a worker running a call (C8)."""
        self._kill("mid-call", pick)

    def kill_mid_collective(self, pick: int) -> None:
        """SIGKILL a worker while the others wait for it inside an all_reduce (C8)."""
        self._kill("mid-collective", pick)

    def _kill(self, when: str, pick: int) -> None:
        """SIGKILL a worker: every pending and later call fails within 10 s, check_health()
        raises, the failure callback runs once (C8)."""
        apart = self._apart()
        rank = apart[pick % len(apart)]
        if when == "mid-collective" and len(self.pids) < 2:
            when = "mid-call"
        what = self._note(f"kill rank {rank} {when}")
        if when != "idle":
            # The futures before it read first: workers whose replies back up (16 MiB
            # ones unread) would never reach the call that is to be in flight.
            for p in sorted(self.pending, key=lambda p: p.seq):
                self._read(p, f"{what}: before it, the future of {p.call.token}")
            self.pending = []
        self.run.stats.fault(f"kill {when}")
        in_flight: Any = None
        if when == "mid-call":
            in_flight = self._wait(
                lambda: self.executor.collective_rpc(probes.sleep, args=(5.0,), non_block=True), what
            ).value
            time.sleep(0.2)
        elif when == "mid-collective":
            self.marker_root = self.marker_root or tempfile.mkdtemp(prefix="harness-chaos-")
            markers = tempfile.mkdtemp(dir=self.marker_root)
            in_flight = self._wait(
                lambda: self.executor.collective_rpc(
                    probes.all_reduce_without_rank, args=(rank, markers, False), non_block=True
                ),
                what,
            ).value
            deadline = time.monotonic() + 10 * load_scale()
            while len(os.listdir(markers)) < self.ws and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.3)  # the others are now inside the all_reduce
        pid = self.pids[rank]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        self.model.died(time.monotonic())
        # First the callback, with nothing asked of the executor: it runs within 10 s
        # of the death whether or not a call meets it.
        self._await_callback()
        self.model.judge_callbacks(what, final=True)
        if in_flight is not None:
            self.model.judge_dead_call(
                self._wait(in_flight.result, f"{what}: the call in flight"), f"{what}: the call in flight"
            )
        for p in sorted(self.pending, key=lambda p: p.seq):
            self.model.judge_echo(
                p.call,
                self._wait(p.future.result, f"{what}: the future of {p.call.token}"),
                f"{what}: the future of {p.call.token}",
                pending=True,
            )
        self.pending = []
        self._health_after_death(f"{what}: check_health()")
        self._await_callback()
        self.model.judge_callbacks(what, final=True)

    def _health_after_death(self, what: str) -> None:
        """check_health() raises once the death is noticed: asked until it does, within C8's 10 s."""
        while True:
            outcome = self._wait(self.executor.check_health, what)
            if outcome.hung or outcome.error is not None or self.model.death_left() <= 0.5:
                break
            time.sleep(0.05)
        self.model.judge_dead_call(outcome, what)

    def _await_callback(self) -> None:
        deadline = time.monotonic() + self.model.death_left()
        while not self.model.callbacks and time.monotonic() < deadline:
            time.sleep(0.02)

    def stall(self, longer: bool, pick: int, nbytes: int) -> None:
        """SIGSTOP a worker, then SIGCONT: shorter than a call's timeout, the call
        returns its own result; longer, it times out (C7). Neither is a death (C8)."""
        apart = self._apart()
        rank = apart[pick % len(apart)]
        longer = longer and self.run.schedules("C7")
        pid = self.pids[rank]
        assert pid is not None
        echo = Echo(self._token(), nbytes)
        stop_s = FIRING_TIMEOUT_S + SLOWER_BY_S if longer else SHORT_STALL_S
        timeout = FIRING_TIMEOUT_S if longer else (SHORT_STALL_TIMEOUT_S if self.run.schedules("C7") else None)
        what = self._note(f"stall rank {rank} for {stop_s:g} s during call {echo.describe()} with timeout={timeout}")
        self.run.stats.fault("stall longer than the timeout" if longer else "stall shorter than the timeout")
        self.timeouts += 1
        os.kill(pid, signal.SIGSTOP)
        resume = threading.Timer(stop_s, os.kill, (pid, signal.SIGCONT))
        resume.start()
        try:
            if longer:
                outcome = self._wait(
                    lambda: self._call(echo, timeout=timeout), what, self._timeout_bound(FIRING_TIMEOUT_S)
                )
                self.model.judge_timeout(outcome, FIRING_TIMEOUT_S, what, echo.token)
            else:
                self.model.judge_echo(echo, self._wait(lambda: self._call(echo, timeout=timeout), what), what)
        finally:
            resume.join()
            os.kill(pid, signal.SIGCONT)
        self.model.judge_callbacks(what)

    def restart(self) -> None:
        """shutdown() within 30 s, the workers gone, a later call refused (C9); then a new executor (C10)."""
        what = self._note(f"executor {self.lives}: shutdown, then a new one")
        self.run.stats.fault("shutdown and a new executor")
        self._shut_down(what)
        self._start()

    def _shut_down(self, what: str) -> None:
        for p in sorted(self.pending, key=lambda p: p.seq):
            if self.model.died_at is None and not p.future.done():
                self._read(p, f"{what}: before it, the future of {p.call.token}")
        self.pending = []
        outcome = self._wait(self.executor.shutdown, f"{what}: shutdown()", SHUTDOWN_BOUND_S * load_scale())
        if outcome.hung or (outcome.error is not None and self.model.died_at is None):
            raise Violation("C9", f"{what}: shutdown() {outcome.describe()}")
        self.model.within(outcome.seconds, SHUTDOWN_BOUND_S, "C9", f"{what}: shutdown()")
        left = [pid for pid in self.pids if pid is not None and pid != os.getpid() and not is_zombie(pid)]
        deadline = time.monotonic() + SHUTDOWN_BOUND_S * load_scale() - outcome.seconds
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [pid for pid in left if not is_zombie(pid)]
        if left:
            raise Violation("C9", f"{what}: worker processes {left} still run after shutdown() returned")
        after = self._wait(
            lambda: self.executor.collective_rpc(probes.rank), f"{what}: a call after it", 10 * load_scale()
        )
        if after.hung or after.error is None:
            raise Violation("C9", f"{what}: a call after shutdown() {after.describe()}, expected it to raise promptly")
        if self.model.died_at is not None:
            self._await_callback()
            self.model.judge_callbacks(what, final=True)
        else:
            self.model.judge_callbacks(what)
        self.executor = None

    def teardown(self) -> None:
        start = time.monotonic()
        try:
            for pid in self.pids:
                if pid is not None and pid != os.getpid():
                    _resume(pid)
            if self.executor is not None:
                try:
                    self._shut_down(f"executor {self.lives}: the example's end")
                except Violation as violation:
                    self.run.found(violation, self.log, self.steps)
                    raise
        finally:
            if self.marker_root is not None:
                shutil.rmtree(self.marker_root, ignore_errors=True)
            self.run.stats.spent["shutdown"] += time.monotonic() - start


def machine_for(run: Run) -> type:
    """The state machine class of ``run``: its rules know the world size and
    what the backend declares (a class per run, since Hypothesis's rules and
    their strategies are set when the class is made)."""
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

    ranks = st.integers(0, run.config.world_size - 1)
    sizes = st.sampled_from(SIZES)
    narrowed = st.one_of(st.none(), ranks)
    can = run.schedules
    guards: dict[str, Callable[[Any], bool]] = {}
    ops = _Operations

    def when(condition: Callable[[Any], bool], then: Any) -> Any:
        """Hypothesis's precondition, kept by the rule's name for a replay (``replay``)."""
        guards[then.__name__] = condition
        return precondition(condition)(then)

    def op(fn: Callable[..., None], **strategies: Any) -> Any:
        """A rule: ``fn`` recorded (``_recorded``), its arguments drawn from ``strategies``."""
        make_rule: Callable[[Any], Any] = rule(**strategies)
        return make_rule(_recorded(fn))

    class ChaosMachine(_Operations, RuleBasedStateMachine):
        chaos_run = run
        start = initialize()(ops.start)
        # ---- calls
        call = op(ops.call, nbytes=sizes, narrowed=narrowed)
        submit = when(
            lambda self: len(self.pending) < MAX_PENDING,
            op(
                ops.submit,
                nbytes=sizes,
                narrowed=narrowed,
                count=st.integers(1, 4),
                read_now=st.one_of(st.none(), st.integers(0, 3)),
            ),
        )
        read = when(
            lambda self: bool(self.pending),
            op(ops.read, pick=st.integers(0, MAX_PENDING - 1), elsewhere=st.booleans()),
        )
        from_threads = when(
            lambda self: can("C24") and self.model.died_at is None,
            op(ops.from_threads, threads=st.integers(2, 4), nbytes=st.sampled_from(THREAD_SIZES)),
        )
        # ---- errors the caller or a worker makes
        timeout_fires = when(
            lambda self: can("C7") and self.timeouts < MAX_TIMEOUTS, op(ops.timeout_fires, non_block=st.booleans())
        )
        worker_raises = when(lambda self: can("C6"), op(ops.worker_raises, rank=ranks, non_block=st.booleans()))
        unpicklable_argument = when(lambda self: can("C20"), op(ops.unpicklable_argument, non_block=st.booleans()))
        unpicklable_result = when(lambda self: can("C20"), op(ops.unpicklable_result, non_block=st.booleans()))
        rank_out_of_range = when(lambda self: can("C2"), op(ops.rank_out_of_range, non_block=st.booleans()))
        check_health = op(ops.check_health)
        # ---- faults on workers: one rule per moment of a death, each as likely as any other operation
        kill_idle = when(ops.can_kill, op(ops.kill_idle, pick=ranks))
        kill_mid_call = when(ops.can_kill, op(ops.kill_mid_call, pick=ranks))
        kill_mid_collective = when(ops.can_kill, op(ops.kill_mid_collective, pick=ranks))
        stall = when(
            lambda self: self.model.died_at is None and bool(self._apart()) and self.timeouts < MAX_TIMEOUTS,
            op(ops.stall, longer=st.booleans(), pick=ranks, nbytes=sizes),
        )
        restart = when(lambda self: self.lives < MAX_LIVES, op(ops.restart))

    ChaosMachine.__name__ = ChaosMachine.__qualname__ = f"Chaos_{run.name}"
    ChaosMachine.guards = guards  # type: ignore[attr-defined]
    return ChaosMachine


def _resume(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass
