"""The oracle of a chaos run: docs/SPEC.md as a model of one executor's life.

The machine (``machine.py``) does something to an executor and hands the
outcome here; the model knows what the contract lets that operation yield in
the executor's present state, and raises :class:`Violation`, naming the clause,
when it yielded something else::

    operation ──► executor ──► outcome (value or error, seconds) ──► Model.judge_* ──► ok, or Violation(Cn)
                                                                        │
                                                   state: healthy ─ timeout ─► either ─► failing
                                                          └──── a worker killed ─► dead (every call fails, 10 s)

Every call of a chaos run is ``probes.echo`` with a token of its own, so a reply
that belongs to another call is told apart from the right one whatever its
value. Bounds are SPEC's (t + 2 s, 10 s, 30 s); on a loaded machine they
stretch with the load (``harness.system.load``), and the run counts each time
only the stretch kept a bound.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from typing import Any

from harness.system.load import load_scale

#: SPEC's bounds (C7, C8, C9).
TIMEOUT_GRACE_S = 2.0
DEATH_BOUND_S = 10.0
SHUTDOWN_BOUND_S = 30.0
#: The suite's own bound on any other wait: a call that is neither timed out nor
#: failed by a death returns within this (payloads of tens of MiB included).
HANG_S = 60.0

#: The errors a timed-out call may raise (concurrent.futures.TimeoutError is its
#: own class before Python 3.11).
TIMEOUT_ERRORS = (TimeoutError, concurrent.futures.TimeoutError)
# What a stub or a half-written backend raises: never the error an operation asks for.
STUB_ERRORS = (NotImplementedError, AttributeError)


class Violation(AssertionError):
    """An operation's outcome that the contract does not allow: the clause it breaks and why."""

    def __init__(self, clause: str, message: str) -> None:
        super().__init__(f"{clause}: {message}")
        self.clause = clause
        self.message = message


@dataclasses.dataclass
class Outcome:
    """What an operation yielded: its value or its error, and how long it took; ``hung``
    when it had not returned within the bound the operation was waited for."""

    value: Any = None
    error: BaseException | None = None
    seconds: float = 0.0
    hung: bool = False

    def describe(self) -> str:
        if self.hung:
            return f"no return within {self.seconds:.1f} s"
        if self.error is not None:
            return f"raised {type(self.error).__name__}: {str(self.error)[:200]!r} after {self.seconds:.2f} s"
        return f"returned {_short(self.value)} after {self.seconds:.2f} s"


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


@dataclasses.dataclass(frozen=True)
class Echo:
    """One call of ``probes.echo`` with ``args=(token, data)``, ``kwargs={"token": token}``:
    what every rank must send back, and what the call is narrowed to."""

    token: str
    nbytes: int
    narrowed: int | None = None

    @property
    def data(self) -> bytes:
        # Deterministic bytes, different for every token: a payload that comes back
        # from another call, or cut short, compares unequal.
        seed = self.token.encode()
        return (seed * (self.nbytes // max(len(seed), 1) + 1))[: self.nbytes]

    def describe(self) -> str:
        size = _size(self.nbytes)
        return f"echo {self.token} ({size}" + (
            f", narrowed to rank {self.narrowed})" if self.narrowed is not None else ")"
        )


def _size(nbytes: int) -> str:
    if nbytes >= 1 << 20:
        return f"{nbytes / (1 << 20):.1f} MiB"
    if nbytes >= 1 << 10:
        return f"{nbytes / (1 << 10):.1f} KiB"
    return f"{nbytes} B"


@dataclasses.dataclass
class Model:
    """One executor's state as the contract sees it.

    ``disturbed``: the last fault since a call last succeeded, as (clause, what):
    a wrong or failed result right after it is charged to that clause (a stale
    reply after a worker's error is C6's, after a timeout C7's).
    """

    world_size: int
    #: Faults so far that may fail the calls in flight when they happen (a death, a timeout).
    epoch: int = 0
    callbacks: list[float] = dataclasses.field(default_factory=list)
    died_at: float | None = None
    timed_out: bool = False
    failing: str | None = None
    disturbed: tuple[str, str] | None = None
    stretched: list[str] = dataclasses.field(default_factory=list)
    #: Tokens of calls that timed out: their late replies must reach no later call (C7).
    late: dict[str, str] = dataclasses.field(default_factory=dict)

    # ---- bounds ---------------------------------------------------------------

    def within(self, seconds: float, bound: float, clause: str, what: str) -> None:
        """``seconds`` within SPEC's ``bound``, or within its stretch by the load (counted)."""
        if seconds <= bound:
            return
        stretched = bound * load_scale()
        if seconds <= stretched:
            self.stretched.append(f"{what}: {seconds:.1f} s against {bound:g} s, kept only by the load's stretch")
            return
        raise Violation(
            clause, f"{what} took {seconds:.1f} s, more than {bound:g} s (stretched by the load: {stretched:.0f} s)"
        )

    def death_left(self) -> float:
        """Seconds left of C8's bound since the death (with the load's stretch)."""
        assert self.died_at is not None
        return max(self.died_at + DEATH_BOUND_S * load_scale() - time.monotonic(), 0.5)

    # ---- echo calls -------------------------------------------------------------

    def judge_echo(self, call: Echo, outcome: Outcome, what: str, pending: bool = False) -> None:
        """A call of ``call``: its own result, or the error the state allows.

        ``pending``: the call was submitted before the fault that changed the state
        (a future in flight when a worker died or a call timed out), so its own
        result is as good as an error."""
        if outcome.hung:
            if self.died_at is not None:
                raise Violation("C8", f"{what}: {outcome.describe()} after a worker died (C8: an error within 10 s)")
            clause = self.disturbed[0] if self.disturbed else "C5"
            raise Violation(clause, f"{what}: {outcome.describe()}" + self._after())
        if outcome.error is not None:
            self._judge_error(call, outcome, what, pending)
            return
        self._judge_value(call, outcome.value, what)
        if self.died_at is not None and not pending:
            raise Violation("C8", f"{what}: returned its result after a worker died: every later call must fail")
        if self.failing is not None and not pending:
            raise Violation(
                "C7",
                f"{what}: returned after an earlier call failed following a timeout ({self.failing}): "
                "an executor that fails a call after a timeout fails every later one",
            )
        if not pending:
            self.timed_out = False
            self.disturbed = None

    def _after(self) -> str:
        return f" (after {self.disturbed[1]})" if self.disturbed else ""

    def _judge_error(self, call: Echo, outcome: Outcome, what: str, pending: bool) -> None:
        error = outcome.error
        assert error is not None
        if self.died_at is not None:
            return  # C8: every pending and later call fails (its timing: judge_death)
        if isinstance(error, STUB_ERRORS):
            raise Violation("C1", f"{what}: {outcome.describe()}: an unimplemented feature, not a call's outcome")
        if self.timed_out or self.failing is not None or (pending and self.disturbed is not None):
            if not pending and self.failing is None:
                self.failing = f"{what} {outcome.describe()}"
            return  # C7: an executor may fail every call after a timeout, saying why
        clause = self.disturbed[0] if self.disturbed else ("C2" if call.narrowed is not None else "C1")
        raise Violation(clause, f"{what}: {outcome.describe()}, expected its result" + self._after())

    def _judge_value(self, call: Echo, value: Any, what: str) -> None:
        if call.narrowed is not None:
            self._judge_entry(call, value, call.narrowed, what, narrowed=True)
            return
        if isinstance(value, concurrent.futures.Future) or not isinstance(value, list):
            raise Violation("C1", f"{what}: returned {_short(value)}, expected a list of {self.world_size} replies")
        if len(value) != self.world_size:
            raise Violation("C1", f"{what}: returned {len(value)} replies, expected {self.world_size} (one per rank)")
        for rank, entry in enumerate(value):
            self._judge_entry(call, entry, rank, what, narrowed=False)

    def _judge_entry(self, call: Echo, entry: Any, rank: int, what: str, narrowed: bool) -> None:
        shape_ok = isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[1], tuple) and len(entry[1]) == 2
        if not shape_ok:
            # Right after a fault, a reply that is not echo's is the faulting call's, left over.
            clause = self.disturbed[0] if self.disturbed else ("C2" if narrowed else "C1")
            raise Violation(
                clause, f"{what}: rank {rank}'s reply is {_short(entry)}, not what echo returns" + self._after()
            )
        got_rank, (token, data), kwargs = entry
        if token != call.token:
            if token in self.late:
                raise Violation(
                    "C7",
                    f"{what}: rank {rank}'s reply is the late reply of {self.late[token]} (token {token!r}), "
                    f"not its own ({call.token!r}): a timed-out call's reply handed to a later call",
                )
            clause = self.disturbed[0] if self.disturbed else "C5"
            raise Violation(
                clause,
                f"{what}: rank {rank}'s reply is that of another call (token {token!r}, expected {call.token!r}): "
                "a reply handed to the wrong call" + self._after(),
            )
        if got_rank != rank:
            clause = "C2" if narrowed else "C1"
            raise Violation(clause, f"{what}: entry {rank} came from rank {got_rank}, expected rank {rank}")
        if data != call.data:
            clause = "C17" if call.nbytes >= 1 << 20 else "C3"
            got = len(data) if isinstance(data, (bytes, bytearray)) else _short(data)
            raise Violation(clause, f"{what}: rank {rank} sent back {got} bytes unlike the {call.nbytes} sent")
        if kwargs != {"token": call.token}:
            raise Violation(
                "C3", f"{what}: rank {rank} received kwargs {_short(kwargs)}, expected {{'token': {call.token!r}}}"
            )

    # ---- faults -------------------------------------------------------------------

    def judge_timeout(self, outcome: Outcome, timeout: float, what: str, token: str | None = None) -> None:
        """A call whose workers are slower than its ``timeout``: TimeoutError within t + 2 s.
        ``token``: the call's, when it is an echo whose late reply could reach a later call."""
        if self.died_at is not None:
            self.judge_dead_call(outcome, what)
            return
        if outcome.hung or outcome.error is None or not isinstance(outcome.error, TIMEOUT_ERRORS):
            if outcome.error is not None and not outcome.hung and (self.timed_out or self.failing is not None):
                # An executor may fail every call after a timeout, saying why (C7).
                self.failing = self.failing or f"{what} {outcome.describe()}"
                return
            raise Violation("C7", f"{what}: {outcome.describe()}, expected TimeoutError within {timeout:g} + 2 s")
        self.within(outcome.seconds, timeout + TIMEOUT_GRACE_S, "C7", what)
        if token is not None:
            self.late[token] = what
        self.timed_out = True
        self.epoch += 1
        self.disturbed = ("C7", what)

    def judge_worker_error(self, outcome: Outcome, message: str, what: str) -> None:
        """A call that raises on one rank: an error carrying the worker's message (C6)."""
        if self.died_at is not None:
            self.judge_dead_call(outcome, what)
            return
        if self.failing is not None and outcome.error is not None and not outcome.hung:
            return
        if outcome.hung or outcome.error is None:
            raise Violation(
                "C6", f"{what}: {outcome.describe()}, expected an error carrying {message!r}" + self._after()
            )
        if message not in str(outcome.error) and not (self.timed_out and not self.failing):
            raise Violation(
                "C6", f"{what}: {outcome.describe()}: the error does not carry the worker's message {message!r}"
            )
        self.disturbed = ("C6", what)

    def judge_refused(self, outcome: Outcome, kinds: tuple[type[BaseException], ...], clause: str, what: str) -> None:
        """A call the caller must refuse before anything is sent (an unpicklable
        argument, a rank out of range): ``collective_rpc`` itself raises one of ``kinds``."""
        if self.died_at is not None and outcome.error is not None:
            return
        if outcome.hung or outcome.error is None or (kinds and not isinstance(outcome.error, kinds)):
            expected = " or ".join(k.__name__ for k in kinds) if kinds else "an error"
            raise Violation(clause, f"{what}: {outcome.describe()}, expected {expected} from collective_rpc itself")
        self.disturbed = (clause, what)

    def judge_failed_call(self, outcome: Outcome, clause: str, what: str) -> None:
        """A call that must fail (an unpicklable result): an error, in time."""
        if self.died_at is not None:
            self.judge_dead_call(outcome, what)
            return
        if outcome.hung or outcome.error is None:
            raise Violation(clause, f"{what}: {outcome.describe()}, expected an error")
        self.disturbed = (clause, what)

    def judge_dead_call(self, outcome: Outcome, what: str) -> None:
        """Any call after a death: an error, within C8's 10 s of the death."""
        assert self.died_at is not None
        if outcome.hung:
            raise Violation("C8", f"{what}: {outcome.describe()} after a worker died: expected an error within 10 s")
        if outcome.error is None:
            raise Violation("C8", f"{what}: {outcome.describe()} after a worker died: every later call must fail")
        if isinstance(outcome.error, STUB_ERRORS):
            raise Violation(
                "C8", f"{what}: {outcome.describe()}: an unimplemented feature, not a failure from the death"
            )

    def died(self, at: float) -> None:
        self.died_at = at
        self.epoch += 1
        self.disturbed = ("C8", "a worker died")

    def judge_callbacks(self, what: str, final: bool = False) -> None:
        """C8: no failure callback while no worker died; once one did, exactly one
        run (of the one registered callback) within 10 s. ``final``: the bound has
        been waited for, so a callback that has not run is a violation now."""
        if self.died_at is None:
            if self.callbacks:
                raise Violation("C8", f"{what}: the failure callback ran though no worker died")
            return
        late = [at - self.died_at for at in self.callbacks]
        if len(late) > 1:
            raise Violation("C8", f"{what}: the failure callback ran {len(late)} times for one death, expected once")
        if not late:
            if final or time.monotonic() - self.died_at > DEATH_BOUND_S * load_scale():
                raise Violation(
                    "C8",
                    f"{what}: the failure callback has not run {time.monotonic() - self.died_at:.1f} s after the death",
                )
            return
        self.within(late[0], DEATH_BOUND_S, "C8", f"{what}: the failure callback")
