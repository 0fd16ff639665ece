"""Side by side: isolated tests run a few at a time, each in its own process group.

Most backend tests wait rather than compute: for a timeout, a death, a worker
to start. ``--harness-jobs N`` lets up to N isolated tests run at once (each
still a forked process of its own, with its own group, deadline and leak
checks); nothing else changes about how a test runs. A test that does not run
isolated, or is marked ``exclusive`` (it measures CPU time or latency), runs
with no other test beside it, in collection order::

    items, in order ──► isolated and not exclusive? ── yes ─► a free slot? start it (fork)
                              │ no                                   │ none: wait for one to end
                              ▼                                      ▼
                   wait until no test runs, then      each end: log start, reports, finish
                   run it the usual way                together, so outputs never interleave

A test's reports are logged when it ends, so the terminal shows tests in the
order they finish.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable

import pytest

from harness.pytest_plugin.isolation import IsolatedTest, progress_every_s
from harness.pytest_plugin.markers import CLAUSE
from harness.pytest_plugin.markers import EXCLUSIVE as EXCLUSIVE_MARKER
from harness.pytest_plugin.markers import ISOLATED as ISOLATED_MARKER

__all__ = ["EXCLUSIVE_MARKER", "ISOLATED_MARKER", "run_side_by_side"]


class _Slot:
    def __init__(self, test: IsolatedTest) -> None:
        self.test = test
        self.fd = os.pidfd_open(test.pid)
        self.next_progress = test.started + progress_every_s()


def run_side_by_side(
    session: pytest.Session,
    jobs: int,
    isolated: Callable[[pytest.Item], bool],
    start: Callable[[pytest.Item], IsolatedTest | None],
    progress: Callable[[str], None] | None,
    variant: Callable[[pytest.Item], str | None] = lambda item: None,
) -> None:
    """Run the session's items, up to ``jobs`` isolated ones at once.

    ``isolated(item)``: whether the item runs in a forked process; ``start(item)``
    forks it, or handles it on the spot (a skip decided here) and returns None.
    ``variant(item)``: the backend variant the item runs; a variant's first test
    ends before its next one starts, so that a factory that fails for it is
    found once, not by every test running beside it."""
    running: list[_Slot] = []
    finished: set[str] = set()  # variants with a test ended

    def untried(item: pytest.Item) -> bool:
        v = variant(item)
        return v is not None and v not in finished and any(variant(s.test.item) == v for s in running)

    items = _first_tests_first(session.items, variant)
    try:
        for i, item in enumerate(items):
            if isolated(item) and item.get_closest_marker(EXCLUSIVE_MARKER) is None:
                while running and (len(running) >= jobs or untried(item)):
                    finished.update(filter(None, map(variant, _wait(running, progress))))
                test = start(item)
                if test is not None:
                    running.append(_Slot(test))
            else:
                while running:
                    _wait(running, progress)
                nextitem = items[i + 1] if i + 1 < len(items) else None
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            _check_stop(session)
        while running:
            _wait(running, progress)
            _check_stop(session)
    except BaseException:
        # Ctrl-C, -x, or an error here: whatever still runs goes now, with its workers.
        for slot in running:
            slot.test.abort()
            os.close(slot.fd)
        raise


#: The clause whose test a variant runs first, alone (see ``run_side_by_side``):
#: C1's blocking call is the quickest check that the factory works, where the
#: test collected first may wait out a timeout (a backend that hangs in C24).
FIRST_CLAUSE = "C1"


def _first_tests_first(items: list[pytest.Item], variant: Callable[[pytest.Item], str | None]) -> list[pytest.Item]:
    """``items``, with each variant's first C1 test moved to where its first test was."""
    out = list(items)
    first_at: dict[str, int] = {}
    for i, item in enumerate(out):
        v = variant(item)
        if v is not None:
            first_at.setdefault(v, i)
    for v, at in first_at.items():
        for j in range(at, len(out)):
            marker = out[j].get_closest_marker(CLAUSE)
            if variant(out[j]) == v and marker is not None and marker.args[:1] == (FIRST_CLAUSE,):
                out.insert(at, out.pop(j))
                break
    return out


def _check_stop(session: pytest.Session) -> None:
    if session.shouldfail:
        raise session.Failed(session.shouldfail)
    if session.shouldstop:
        raise session.Interrupted(session.shouldstop)


def _wait(running: list[_Slot], progress: Callable[[str], None] | None) -> list[pytest.Item]:
    """Block until running tests end or reach their deadline; log them, free
    their slots, and return them."""
    now = time.monotonic()
    wake = min(*(s.test.deadline for s in running), *(s.next_progress for s in running))
    ready = select.select([s.fd for s in running], [], [], max(0.0, wake - now))[0]
    now = time.monotonic()
    ended = []
    for slot in list(running):
        if slot.fd in ready:
            status: int | None = os.waitpid(slot.test.pid, 0)[1]
        elif now >= slot.test.deadline and not slot.test.grant_load_grace(progress):
            status = None
        else:
            if progress is not None and now >= slot.next_progress:
                progress(f"[harness] still running after {now - slot.test.started:.0f} s: {slot.test.item.nodeid}")
                slot.next_progress = now + progress_every_s()
            continue
        running.remove(slot)
        os.close(slot.fd)
        _log(slot.test.item, slot.test.finish(status))
        ended.append(slot.test.item)
    return ended


def _log(item: pytest.Item, reports: list[pytest.TestReport]) -> None:
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in reports:
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
