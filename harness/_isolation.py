"""Isolation: each distributed test runs in a fresh forked process.

The child leads its own process group, runs the test's whole protocol (setup,
call, teardown) and writes its reports to a file; the parent waits with a
deadline. Past it, the child is asked for its stacks (SIGUSR1, faulthandler),
then its whole group (the test and every worker it started) is killed, and the
test is reported failed with the stacks attached; the run goes on. Whatever
the test left in its group is killed after it, and reported.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import select
import shutil
import signal
import tempfile
import time
from collections.abc import Callable

import pytest

from harness import leaks
from harness._plugin_options import Options
from harness._reaper import Reaper, reap
from harness._stacks import STACKS_DIR_ENV
from harness._stacks import collect as collect_stacks
from harness._stacks import register as register_stacks

__all__ = ["run_isolated", "skipped_report", "timeout_of"]


def timeout_of(item: pytest.Item, opts: Options) -> float:
    """--harness-timeout (or its env/ini twin) when given, else the test's
    timeout marker, else the default."""
    if opts.timeout_explicit:
        return opts.timeout_s
    marker = item.get_closest_marker("timeout")  # pytest-timeout's marker, if the test sets one
    if marker is not None and marker.args:
        return float(marker.args[0])
    return opts.timeout_s


def run_isolated(
    item: pytest.Item,
    timeout_s: float,
    reaper: Reaper | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[pytest.TestReport]:
    """Run ``item`` in a forked child leading its own process group; its reports.

    ``reaper`` learns of the group while it runs (so that pytest's death takes
    it along); ``progress`` hears, now and then, that a long test is still running."""
    from _pytest.runner import runtestprotocol

    config = item.config
    # Stacks land in a folder: the test process's and its workers', one file each.
    stacks_dir = tempfile.mkdtemp(prefix="harness-stacks-")
    # The test process's own temporary files go in a folder of the test's, which
    # goes with it however the test ends (an executor killed mid-test cannot clean up).
    test_tmp = tempfile.mkdtemp(prefix="harness-test-")
    # Reports travel through a file, not a pipe: a worker the test forked (and
    # leaked) would inherit a pipe's write end and hold it open past the test.
    results = tempfile.NamedTemporaryFile(prefix="harness-reports-", suffix=".json", delete=False)  # noqa: SIM115
    results.close()
    # pytest-timeout arms SIGALRM in this process for a test's timeout marker;
    # here the deadline is ours, and firing in the parent would end the run.
    hook = getattr(config.hook, "pytest_timeout_cancel_timer", None)
    if hook is not None:
        hook(item=item)
    # pytest's faulthandler_timeout keeps a watchdog thread armed around each
    # test. A forked child would inherit it armed but without its thread, and
    # deadlock the first time it is cancelled; our own timeout replaces it.
    faulthandler.cancel_dump_traceback_later()
    pid = os.fork()
    if pid == 0:  # the child: run the test, write the reports, never return into pytest
        code = 0
        try:
            if reaper is not None:
                reaper.close_in_child()
            os.setpgid(0, 0)
            # Whatever this test starts carries a tag that begins with this pid:
            # the reaper finds it even where it left the group (setsid).
            leaks.tag()
            tempfile.tempdir = test_tmp
            os.environ[STACKS_DIR_ENV] = stacks_dir  # workers of the built-in backends dump there too
            register_stacks(stacks_dir)  # the parent asks with SIGUSR1 before it kills us
            reports = runtestprotocol(item, log=False, nextitem=None)
            data = [config.hook.pytest_report_to_serializable(config=config, report=r) for r in reports]
            with open(results.name, "w", encoding="utf-8") as out:
                json.dump(data, out)
        except BaseException:  # noqa: BLE001 - report through the exit code; the parent explains
            code = 3
        finally:
            os._exit(code)
    # Both sides set the group, so that it exists before either relies on it.
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    if reaper is not None:
        reaper.register(pid, [results.name, stacks_dir, test_tmp])
    dumped = ""
    try:
        status = _wait_child(pid, timeout_s, item.nodeid, progress)
        timed_out = status is None
        if timed_out:
            dumped = collect_stacks([pid, *_group_members(pid)], stacks_dir)
            _kill_group(pid, settle_s=0)
            _, status = os.waitpid(pid, 0)
        leftover = _kill_group(pid)  # anything the test left in its group (workers) dies now
    except BaseException:
        # Ctrl-C (or any error here): the test and all it started go now, not later.
        reap(pid, [])
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        raise
    finally:
        with open(results.name, encoding="utf-8") as f:
            raw = f.read()
        os.unlink(results.name)
        if not dumped:
            dumped = collect_stacks([], stacks_dir)  # what the child dumped on its own
        shutil.rmtree(stacks_dir, ignore_errors=True)
        shutil.rmtree(test_tmp, ignore_errors=True)
        if reaper is not None:
            reaper.unregister(pid)
    if timed_out:
        return [
            _synthetic(
                item,
                "call",
                f"timed out after {timeout_s:g} s: killed with its process group "
                f"(leftover processes: {leftover}).\nStacks at the timeout:\n{dumped}",
            )
        ]
    try:
        data = json.loads(raw)
        reports = [config.hook.pytest_report_from_serializable(config=config, data=d) for d in data]
        for report in reports:
            if isinstance(report.longrepr, list):  # a skip's (path, line, reason), listed by JSON
                report.longrepr = tuple(report.longrepr)
    except ValueError:
        return [_synthetic(item, "call", f"the test process died (status {status}) before reporting.\n{dumped}")]
    if leftover:
        reports.append(_synthetic(item, "teardown", f"processes left running after the test: {leftover}"))
    return reports


#: After this long, and as often again, a still-running test is named on the terminal.
PROGRESS_EVERY_S = float(os.environ.get("HARNESS_PROGRESS_S") or 30.0)


def _wait_child(
    pid: int, timeout_s: float, nodeid: str = "", progress: Callable[[str], None] | None = None
) -> int | None:
    """The child's wait status once it exits, or None after ``timeout_s`` s."""
    start = time.monotonic()
    deadline = start + timeout_s
    pidfd_open = getattr(os, "pidfd_open", None)
    fd = pidfd_open(pid) if pidfd_open is not None else None
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                return None
            slice_s = min(deadline - now, PROGRESS_EVERY_S if progress else deadline - now)
            if fd is not None:  # Linux: a blocking wait with a timeout
                if select.select([fd], [], [], slice_s)[0]:
                    return os.waitpid(pid, 0)[1]
            else:  # elsewhere no blocking wait with a timeout exists: poll
                end = now + slice_s
                while time.monotonic() < end:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        return status
                    time.sleep(0.05)
            if progress is not None and time.monotonic() < deadline:
                progress(f"[harness] still running after {time.monotonic() - start:.0f} s: {nodeid}")
    finally:
        if fd is not None:
            os.close(fd)


def _kill_group(pgid: int, settle_s: float = 2.0) -> list[int]:
    """SIGKILL every process in the group, after ``settle_s`` s for them to exit
    on their own; return the pids that had not."""
    deadline = time.monotonic() + settle_s
    while True:
        pids = _group_members(pgid)
        if not pids or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return pids


def _group_members(pgid: int) -> list[int]:
    import psutil

    pids = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.pid != pgid and proc.status() != psutil.STATUS_ZOMBIE:
                pids.append(proc.pid)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return pids


def _synthetic(item: pytest.Item, when: str, message: str) -> pytest.TestReport:
    # The tags collection gave the item: the report lands in the test's cells.
    props = list(item.user_properties)
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords=dict.fromkeys(item.keywords, 1),
        outcome="failed",
        longrepr=f"[harness] {item.nodeid}: {message}",
        when=when,  # type: ignore[arg-type]
        user_properties=props,
    )


def skipped_report(item: pytest.Item, reason: str) -> pytest.TestReport:
    """A skip at set-up, decided in this process without running the test."""
    path, line, _ = item.location
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords=dict.fromkeys(item.keywords, 1),
        outcome="skipped",
        longrepr=(path, (line or 0) + 1, f"Skipped: {reason}"),
        when="setup",
        user_properties=list(item.user_properties),
    )
