"""Assertion helpers for the suite: failures read "got X, expected Y [call]"."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil


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


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie counts as exited but not reaped)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


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


def on_rank(rank: int) -> Callable[[str], str]:
    """A message prefixer for ``torch.testing.assert_close(msg=...)``."""

    def prefix(message: str) -> str:
        return f"rank {rank}: {message}"

    return prefix
