"""The CPU a test has cost so far: its own process, the processes it started and
reaped, and those it started that still run.

Read at the end of each of a test's phases (setup, call, teardown), it splits a
test's CPU into its executor's start-up and the check itself. Processes the test
did not start (a run-wide Ray cluster's raylet and the actors it forks) are not
in it.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable

import psutil

__all__ = [
    "CPU_LOG_ENV",
    "cpu_so_far",
    "log_run_cpu",
    "log_test_cpu",
    "logging_wanted",
    "process_cpu_s",
    "run_started",
]

#: Where set, a file every isolated test's CPU and wall time by phase is
#: appended to, a JSON line each (``tests/perf/scripts/suite_times.py cpu`` reads it).
CPU_LOG_ENV = "HARNESS_CPU_LOG"


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of live process ``pid``; 0.0 where it is gone
    or unreadable."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return 0.0
    return float(times.user + times.system)


def cpu_so_far(live: Iterable[int]) -> float:
    """CPU seconds of this process and every child it reaped, plus those of the
    still-running processes ``live`` (the ones it started)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    return total + sum(process_cpu_s(pid) for pid in live if pid != os.getpid())


_STARTED: list[float] = []
#: The log file this process writes to, taken from the environment at the start
#: of its run (and removed from it: the pytest runs its tests start log nothing,
#: their CPU is already their test's).
_LOG: list[str] = []


def _run_name() -> str:
    """This run's command line, as a make job started it (its name in the tables)."""
    import sys

    return " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]])[:1000]


def run_started() -> None:
    """Mark the start of this process's pytest run (:func:`log_run_cpu`'s wall
    time), and take the log file from the environment."""
    import time

    _STARTED[:] = [time.monotonic()]
    _LOG[:] = [os.environ.pop(CPU_LOG_ENV, "")]


def _log_path() -> str:
    return (_LOG[0] if _LOG else os.environ.get(CPU_LOG_ENV)) or ""


def logging_wanted() -> bool:
    """Whether this run logs its CPU (:data:`CPU_LOG_ENV`): a test process
    measures its phases only then."""
    return bool(_log_path())


def log_run_cpu() -> None:
    """Append this run's own figures (this process and every child it reaped:
    the tests it forked and their workers; a Ray cluster's processes are not
    its children) to the file :data:`CPU_LOG_ENV` names, if any."""
    import time

    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    wall = time.monotonic() - _STARTED[0] if _STARTED else 0.0
    _append({"run": _run_name(), "run_cpu": round(cpu, 2), "run_wall": round(wall, 2), "pid": os.getpid()})


def log_test_cpu(nodeid: str, cpu: dict[str, float], wall: dict[str, float]) -> None:
    """Append one test's figures to the file :data:`CPU_LOG_ENV` names, if any."""
    _append({"test": nodeid, "cpu": cpu, "wall": wall, "run": _run_name(), "pid": os.getpid()})


def _append(entry: dict[str, object]) -> None:
    import json

    path = _log_path()
    if not path:
        return
    line = json.dumps(entry)
    # One write of one line, appended: runs side by side share the file.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
