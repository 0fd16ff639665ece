"""The suite's own watchdog: a call waited for on a thread of its own, so that
no wait depends on a feature of the backend under test (``result(timeout=...)``
is C4's to check) and a call that hangs fails its check within its bound,
named. The hung thread is a daemon, left behind (its name starts with
``harness-watchdog``, which the leak check passes over).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["bounded", "outcome_of", "watched"]

T = TypeVar("T")


def watched(
    fn: Callable[[], T], what: str, wait: Callable[[threading.Thread, list[tuple[bool, Any]]], object]
) -> list[tuple[bool, Any]]:
    """``fn()`` on a daemon watchdog thread, waited for by ``wait(thread, box)``; the box
    holds (True, its result) or (False, its exception) once it returned, else nothing."""
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            box.append((False, exc))

    thread = threading.Thread(target=run, name=f"harness-watchdog: {what}"[:60], daemon=True)
    thread.start()
    wait(thread, box)
    return box


def outcome_of(box: list[tuple[bool, Any]]) -> Any:
    ok, value = box[0]
    if not ok:
        raise value
    return value


def bounded(fn: Callable[[], T], seconds: float, what: str, why_longer: str = "") -> T:
    """``fn()``, run on a watchdog thread: its result, or its exception re-raised
    here; fails the test if it has not returned within ``seconds``. The hung
    thread is a daemon, left behind: the test process is the suite's own and ends.
    ``why_longer``: the failure names a bound shorter than ``seconds``, and why it waited longer."""
    __tracebackhide__ = True
    box = watched(fn, what, lambda thread, _: thread.join(seconds))
    if not box:
        raise AssertionError(f"{what} did not return within {why_longer or f'{seconds:g} s'}")
    return outcome_of(box)  # type: ignore[no-any-return]
