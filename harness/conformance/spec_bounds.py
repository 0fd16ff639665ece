"""SPEC.md's own time bounds (C8's 10 s, C9's 30 s, C12's 10 s, C13's 10 s and
30 s), as the checks wait on them.

On a machine no busier than its CPUs a bound is exact. On a loaded one the
wait stretches with the load (:func:`harness.system.load.load_scale`): a busy
machine may make a correct backend slow, and must not make it FAIL. What
happened after SPEC's bound but within the stretch passes, and the report says
so in the test's note: the bound itself was not judged there (a quiet machine
judges it). A backend that never gets there fails either way, later.
``HARNESS_EXACT_BOUNDS=1`` keeps every bound exact: a strict run, and the
suite's own runs of broken backends, which must fail, fail sooner. A test on
its backend's known-failures list is judged exactly too (:func:`exact_while`):
the stretch spares a correct backend a FAIL, and that test is expected to
fail; stretched, vLLM's known failures waited six times SPEC's bounds, step
after step, until the run's timeout killed them (nine of them, 240 s each, in
one CI run). On a loaded machine a fixed one may then read as still failing,
never the reverse; a quiet run tells.

Notes are collected here and put on the test's report by the plugin
(:func:`drain_notes`), so that a helper deep in a check needs no ``request``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from harness.conformance._checks import bounded, error_from, wait_until
from harness.system.load import load_per_cpu, load_scale

T = TypeVar("T")

#: Set (to anything but 0): SPEC's bounds are exact even on a loaded machine (faster to fail, strict).
EXACT_ENV = "HARNESS_EXACT_BOUNDS"

_notes: list[str] = []
#: True while a test its backend expects to fail runs (:func:`exact_while`).
_exact_here = False


@contextmanager
def exact_while(exact: bool) -> Iterator[None]:
    """SPEC's bounds are exact within the block if ``exact`` (a known failure runs)."""
    global _exact_here
    before, _exact_here = _exact_here, exact or _exact_here
    try:
        yield
    finally:
        _exact_here = before


def stretched(bound_s: float) -> float:
    """How long a check waits for SPEC's ``bound_s`` now: as written on a quiet
    machine (or with ``HARNESS_EXACT_BOUNDS`` set, or in a known failure), times
    the load per CPU on a busy one."""
    if _exact_here or os.environ.get(EXACT_ENV, "") not in ("", "0"):
        return bound_s
    return bound_s * load_scale()


def waited(bound_s: float) -> str:
    """What a failure adds after naming SPEC's ``bound_s``: nothing on a quiet
    machine; on a loaded one, the longer wait it got."""
    wait = stretched(bound_s)
    if wait <= bound_s:
        return ""
    return f" (SPEC's bound; waited {wait:.0f} s: the machine was loaded, {load_per_cpu():.1f} runnable per CPU)"


def _waited(bound_s: float) -> str:
    return f"{bound_s:g} s{waited(bound_s)}"


def judge(took_s: float, bound_s: float, what: str) -> None:
    """Something SPEC bounds by ``bound_s`` happened after ``took_s``: a note in
    the report if that was past the bound (only a loaded machine waits so long)."""
    if took_s > bound_s:
        _notes.append(
            f"{what} took {took_s:.1f} s, past SPEC's {bound_s:g} s: the machine was loaded "
            f"({load_per_cpu():.1f} runnable per CPU), so the wait stretched to {stretched(bound_s):.0f} s; "
            f"SPEC's bound itself was not judged here"
        )


def wait_within(predicate: Callable[[], bool], bound_s: float, what: str, since: float | None = None) -> bool:
    """``predicate()`` came true within SPEC's ``bound_s`` of ``since`` (default:
    now), stretched with the load; a late success is noted (:func:`judge`)."""
    start = time.monotonic() if since is None else since
    ok = wait_until(predicate, max(0.0, start + stretched(bound_s) - time.monotonic()))
    if ok:
        judge(time.monotonic() - start, bound_s, what)
    return ok


def left(since: float, bound_s: float) -> float:
    """Seconds left of SPEC's ``bound_s`` (stretched) counted from ``since``."""
    return max(since + stretched(bound_s) - time.monotonic(), 0.1)


def bounded_by_spec(fn: Callable[[], T], bound_s: float, what: str) -> T:
    """``fn()`` under the suite's watchdog, allowed SPEC's ``bound_s`` stretched
    with the load; a late return is noted (:func:`judge`)."""
    __tracebackhide__ = True
    start = time.monotonic()
    try:
        return bounded(fn, stretched(bound_s), what, _waited(bound_s))
    finally:
        took = time.monotonic() - start
        if took <= stretched(bound_s):
            judge(took, bound_s, what)


def raised_within(
    fn: Callable[[], object], bound_s: float, what: str, catch: type[BaseException] = Exception
) -> BaseException | None:
    """The error ``fn()`` raised (``None`` if it returned), allowed SPEC's
    ``bound_s`` stretched with the load (:func:`bounded_by_spec`)."""
    __tracebackhide__ = True
    return bounded_by_spec(error_from(fn, catch), bound_s, what)


def drain_notes() -> list[str]:
    """The notes since the last drain (the plugin puts them on the test's report)."""
    taken = list(_notes)
    _notes.clear()
    return taken
