"""Assertion helpers for the suite: failures read "got X, expected Y [call]".

Also the suite's own outcomes other than pass and FAIL (SPEC.md, "Outcomes"),
raised from inside a test: :func:`not_applicable` (nothing to check) and
:func:`blocked_by` (a prerequisite clause fails, and is reported under its own
id); and the suite's own watchdog, :func:`bounded`, so that no wait depends on
a backend feature under test (``result(timeout=...)`` is C4's to check, not
C5's) and a hang fails its clause within seconds, named.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import psutil
import pytest

from harness.system.processes import is_zombie
from harness.system.watchdog import bounded, outcome_of, watched
from harness.verdicts import blocked_reason, not_applicable_reason

__all__ = [
    "STALL_S",
    "blocked_by",
    "bounded",
    "bounded_while_progressing",
    "error_from",
    "error_of",
    "expect_equal",
    "is_one_future",
    "not_applicable",
    "one_future",
    "process_gone",
    "process_reaped",
    "raised_by",
    "result_of",
    "token",
    "wait_until",
    "wait_while_progressing",
    "within",
]

T = TypeVar("T")


def not_applicable(reason: str) -> NoReturn:
    """End the test as "not applicable": the backend has nothing this check could look at."""
    __tracebackhide__ = True
    pytest.skip(not_applicable_reason(reason))


def blocked_by(clause: str, reason: str) -> NoReturn:
    """End the test as "blocked by ``clause``": it cannot proceed because the
    backend fails that clause (whose own tests report it)."""
    __tracebackhide__ = True
    pytest.skip(blocked_reason(clause, reason))


def is_one_future(obj: Any) -> bool:
    """Has the ``concurrent.futures.Future`` interface SPEC.md's C4 names."""
    return all(callable(getattr(obj, name, None)) for name in ("result", "done", "exception", "add_done_callback"))


def one_future(obj: Any, what: str) -> Any:
    """``obj`` if it is one future; else the test is blocked by C4 (C4's own tests fail it)."""
    __tracebackhide__ = True
    if not is_one_future(obj):
        blocked_by("C4", f"{what} returned {type(obj).__name__}, not one future")
    return obj


def result_of(future: Any, seconds: float, what: str) -> Any:
    """The future's result, waited for by the suite's watchdog rather than by
    ``result(timeout)`` (a C4 feature): only C4's own tests rely on that."""
    __tracebackhide__ = True
    return bounded(future.result, seconds, f"{what}: result()")


def raised_by(
    fn: Callable[[], object], seconds: float, what: str, catch: type[BaseException] = Exception
) -> BaseException | None:
    """The error ``fn()`` raised (``None`` if it returned), bounded by the suite's watchdog."""
    __tracebackhide__ = True
    return bounded(error_from(fn, catch), seconds, what)


def error_from(fn: Callable[[], object], catch: type[BaseException] = Exception) -> Callable[[], BaseException | None]:
    """``fn`` as a call that returns the error it raised (``None`` if it returned)."""

    def outcome() -> BaseException | None:
        try:
            fn()
        except catch as exc:  # the outcome under test
            return exc
        return None

    return outcome


def error_of(future: Any, seconds: float, what: str) -> BaseException | None:
    """The future's exception (``None`` if it succeeded), waited for by the suite's watchdog."""
    __tracebackhide__ = True
    return raised_by(future.result, seconds, f"{what}: the future's outcome", catch=BaseException)


def expect_equal(got: Any, expected: Any, what: str) -> None:
    __tracebackhide__ = True
    if got != expected:
        raise AssertionError(f"got {got!r}, expected {expected!r} [{what}]")


@contextmanager
def within(seconds: float, what: str) -> Iterator[None]:
    """Fails if the block takes longer than ``seconds`` (it is not interrupted)."""
    __tracebackhide__ = True
    start = time.monotonic()
    yield
    took = time.monotonic() - start
    if took > seconds:
        raise AssertionError(f"{what} took {took:.1f} s, expected at most {seconds:g} s")


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def wait_while_progressing(
    done: Callable[[], bool],
    progress: Callable[[], object],
    stall_s: float,
    limit_s: float,
    interval: float = 0.05,
) -> bool:
    """Wait until ``done()``, as long as ``progress()`` keeps changing: False once
    it stood still for ``stall_s`` s, or after ``limit_s`` s in all. A wait on
    events: slow progress on a busy machine keeps it going, a stop ends it early."""
    start = last_change = time.monotonic()
    seen = progress()
    while True:
        if done():
            return True
        now = time.monotonic()
        if now - last_change >= stall_s or now - start >= limit_s:
            return False
        time.sleep(interval)
        value = progress()
        if value != seen:
            seen, last_change = value, time.monotonic()


#: How long a wait on progress (``bounded_while_progressing``) goes on with none,
#: before the load's stretch: a correct backend makes some within it on a quiet machine.
STALL_S = 15.0


def bounded_while_progressing(
    fn: Callable[[], T], progress: Callable[[], object], stall_s: float, limit_s: float, what: str
) -> T:
    """``bounded``, waited for while ``progress()`` keeps changing: fails the test
    once it stood still for ``stall_s`` s, or after ``limit_s`` s in all, naming
    where it stood. A backend that stops is told in seconds; a slow one on a busy
    machine keeps going."""
    __tracebackhide__ = True
    start = time.monotonic()
    box = watched(fn, what, lambda _, box: wait_while_progressing(lambda: bool(box), progress, stall_s, limit_s))
    if not box:
        raise AssertionError(
            f"{what} did not return within {time.monotonic() - start:.0f} s: it stood at {progress()!r}, "
            f"with no progress for {stall_s:.0f} s (or {limit_s:.0f} s in all)"
        )
    return outcome_of(box)  # type: ignore[no-any-return]


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie counts as exited but not reaped)."""
    return is_zombie(pid)


def process_reaped(pid: int) -> bool:
    """True once ``pid`` is gone, and not left a zombie child of this process."""
    try:
        proc = psutil.Process(pid)
        if proc.status() != psutil.STATUS_ZOMBIE:
            return False
        return bool(proc.ppid() != os.getpid())  # an orphan zombie is init's to reap, not ours
    except psutil.NoSuchProcess:
        return True


def token() -> str:
    return os.urandom(6).hex()
