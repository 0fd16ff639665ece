"""Bounded waits: a call's outcome, or ``hung`` once its bound has passed.

The chaos run's every wait on an executor goes through :func:`attempt`, so that
nothing a backend does can hang the run: on the main thread an alarm ends the
wait, elsewhere a watchdog thread does (the call's thread is left behind, a
daemon). The schedule (``machine.py``), the soak (``soak.py``) and the run's
start-ups (``state.py``) share them.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.chaos.model import Outcome
from harness.system.watchdog import watched

__all__ = ["attempt", "attempt_on_thread"]


class _Hung(BaseException):
    """Raised in the main thread by the alarm of :func:`attempt`."""


def attempt(fn: Callable[[], Any], bound: float, what: str) -> Outcome:
    """``fn()``, waited for at most ``bound`` seconds: its outcome, or ``hung``.

    On the main thread an alarm (SIGALRM) ends the wait: a call costs two system
    calls more, where a watchdog thread per call cost 12 ms on a loaded 2-core
    machine (measured), more than a call itself. Elsewhere, a watchdog thread."""
    if threading.current_thread() is threading.main_thread():
        return _attempt_with_alarm(fn, bound)
    return attempt_on_thread(fn, bound, what)


def attempt_on_thread(fn: Callable[[], Any], bound: float, what: str) -> Outcome:
    """``fn()`` on a watchdog thread of its own (the suite's, ``harness.system.watchdog``),
    waited for at most ``bound`` seconds."""
    start = time.monotonic()
    box = watched(fn, what, lambda thread, _: thread.join(bound))
    seconds = time.monotonic() - start
    if not box:
        return Outcome(hung=True, seconds=bound)
    ok, value = box[0]
    return Outcome(value=value, seconds=seconds) if ok else Outcome(error=value, seconds=seconds)


def _attempt_with_alarm(fn: Callable[[], Any], bound: float) -> Outcome:
    def ring(signum: int, frame: Any) -> None:
        raise _Hung()

    previous = signal.signal(signal.SIGALRM, ring)
    start = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, max(bound, 0.001))
        try:
            value = fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return Outcome(value=value, seconds=time.monotonic() - start)
    except _Hung:
        return Outcome(hung=True, seconds=time.monotonic() - start)
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        return Outcome(error=exc, seconds=time.monotonic() - start)
    finally:
        signal.signal(signal.SIGALRM, previous)
