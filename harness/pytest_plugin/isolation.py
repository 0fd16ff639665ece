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
import math
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence

import pytest

from harness.backends import PRELOAD, preload
from harness.pytest_plugin.options import PROGRESS_VARIABLE, Options
from harness.system import leaks, leftovers
from harness.system.cpu import cpu_so_far, log_test_cpu, logging_wanted
from harness.system.leaks import SHM_DIR
from harness.system.load import load_per_cpu, load_scale
from harness.system.reaper import Reaper, reap
from harness.system.stacks import STACKS_DIR_ENV
from harness.system.stacks import collect as collect_stacks
from harness.system.stacks import register as register_stacks
from harness.system.world import enter as enter_world
from harness.verdicts import Prop

__all__ = [
    "SHARED_SHM_KEY",
    "WORLD_KEY",
    "IsolatedTest",
    "prepare_parent",
    "run_isolated",
    "skipped_report",
    "timeout_of",
]

#: On an item whose test runs as a driver of simulated nodes: the host pid of
#: their world's init, whose namespaces the test process joins (harness.system.world).
WORLD_KEY = pytest.StashKey[int]()
#: On an item whose backend's workers run in processes started before the test
#: (a run-wide session, as a Ray cluster: its actors are children of its raylet)
#: and meet the caller in /dev/shm by name (a Ray compiled graph's semaphores):
#: why the test keeps the machine's /dev/shm, its leftovers told by a diff. A
#: private one would hide from the caller what the session's processes create.
SHARED_SHM_KEY = pytest.StashKey[str]()

#: torch's thread count here before prepare_parent set it to one: each test process gets it back.
_parent_torch_threads: int | None = None
_prepared = False


def prepare_parent(more: Sequence[str] = ()) -> None:
    """Import :data:`harness.backends.PRELOAD` and ``more`` (what the selected backends declare
    in ``preload``) here, once, before any test runs.

    torch's CPU thread pool (OpenMP) does not survive a fork: a test process
    forked after this process ran a parallel torch op hangs in its first one.
    So this process keeps torch to one thread, which starts no pool, and each
    test process gets the machine's thread count back (``_in_child``)."""
    global _prepared, _parent_torch_threads
    if _prepared:
        return
    _prepared = True
    preload((*PRELOAD, *more))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        _parent_torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)


def _in_child() -> None:
    if _parent_torch_threads is not None:
        sys.modules["torch"].set_num_threads(_parent_torch_threads)


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
    stretch: bool = True,
) -> list[pytest.TestReport]:
    """Run ``item`` in a forked child leading its own process group; its reports.

    ``reaper`` learns of the group while it runs (so that pytest's death takes
    it along); ``progress`` hears, now and then, that a long test is still running;
    ``stretch``: the timeout stretches with the machine's load (:func:`load_grace_s`),
    as it does unless it was given explicitly."""
    run = IsolatedTest(item, timeout_s, reaper, stretch)
    try:
        status = _wait_child(run.pid, timeout_s, item.nodeid, progress, stretch)
    except BaseException:
        run.abort()
        raise
    return run.finish(status)


class IsolatedTest:
    """One test running in a forked child that leads its own process group.

    Started on construction; :meth:`finish` takes the child's wait status (or
    None past its deadline) and returns the test's reports."""

    def __init__(self, item: pytest.Item, timeout_s: float, reaper: Reaper | None = None, stretch: bool = True) -> None:
        self.item, self.timeout_s, self._reaper = item, timeout_s, reaper
        #: Whether the timeout stretches with the machine's load (not where it was given explicitly).
        self.stretch = stretch
        self.started = time.monotonic()
        self.deadline = self.started + timeout_s
        # Stacks land in a folder: the test process's and its workers', one file each.
        self._stacks_dir = tempfile.mkdtemp(prefix="harness-stacks-")
        # The test process's own temporary files go in a folder of the test's, which
        # goes with it however the test ends (an executor killed mid-test cannot clean up).
        self._test_tmp = tempfile.mkdtemp(prefix="harness-test-")
        # Reports travel through a file, not a pipe: a worker the test forked (and
        # leaked) would inherit a pipe's write end and hold it open past the test.
        results = tempfile.NamedTemporaryFile(prefix="harness-reports-", suffix=".json", delete=False)  # noqa: SIM115
        results.close()
        self._results = results.name
        config = item.config
        # pytest-timeout arms SIGALRM in this process for a test's timeout marker;
        # here the deadline is ours, and firing in the parent would end the run.
        hook = getattr(config.hook, "pytest_timeout_cancel_timer", None)
        if hook is not None:
            hook(item=item)
        # pytest's faulthandler_timeout keeps a watchdog thread armed around each
        # test. A forked child would inherit it armed but without its thread, and
        # deadlock the first time it is cancelled; our own timeout replaces it.
        faulthandler.cancel_dump_traceback_later()
        with warnings.catch_warnings():
            # Python 3.12+ warns about forking a process with threads; torch's
            # import leaves an idle native one here, and an "error" filter would
            # turn the warning into an exception in this process after the fork.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            self._child()
        self.pid = pid
        # Both sides set the group, so that it exists before either relies on it.
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        if reaper is not None:
            reaper.register(pid, [self._results, self._stacks_dir, self._test_tmp])

    def _child(self) -> None:
        """Run the test, write the reports, never return into pytest."""
        code = 0
        try:
            if self._reaper is not None:
                self._reaper.close_in_child()
            os.setpgid(0, 0)
            # First, while this process has one thread (mount namespaces take no other).
            world = self.item.stash.get(WORLD_KEY, None)
            carry: tuple[str, ...] = ()
            if world is not None:
                try:
                    enter_world(world)
                except OSError as exc:
                    with open(self._results, "w", encoding="utf-8") as out:
                        json.dump({"error": f"the test process could not join the simulated nodes' world: {exc}"}, out)
                    raise
            # The folders already in /dev/shm (a cluster's files for its drivers, as
            # the simulated head's Ray folder) stay in sight of a private one.
            with contextlib.suppress(OSError):
                carry = tuple(sorted(n for n in os.listdir(SHM_DIR) if os.path.isdir(os.path.join(SHM_DIR, n))))
            _in_child()
            # Whatever this test starts carries a tag that begins with this pid:
            # the reaper finds it even where it left the group (setsid).
            leaks.tag()
            # Every process of the test (workers too) puts its files in the test's folder.
            tempfile.tempdir = self._test_tmp
            os.environ["TMPDIR"] = self._test_tmp
            keep = bool(self.item.config.getoption("harness_keep_leftovers", False))
            shared = self.item.stash.get(SHARED_SHM_KEY, None)
            if keep:
                why_shared: str | None = "kept for debugging (--harness-keep-leftovers)"
            elif shared is not None:
                why_shared = shared
            else:
                why_shared = leftovers.enter_private_shm(carry)
            shm_before = None if why_shared is None else leaks.shm_segments(include_semaphores=True)
            os.environ[STACKS_DIR_ENV] = self._stacks_dir  # workers of the built-in backends dump there too
            register_stacks(self._stacks_dir)  # the parent asks with SIGUSR1 before it kills us
            from _pytest.runner import runtestprotocol

            config = self.item.config
            if logging_wanted():  # three scans of /proc a test: only where a log asks for them
                config.pluginmanager.register(_PhaseCpu(), "harness-phase-cpu")
            from _pytest.warnings import catch_warnings_for_item

            # The warning filters (ini, marks) pytest applies around a test in its
            # own process, also where this process was forked outside them.
            with catch_warnings_for_item(config, ihook=self.item.ihook, when="runtest", item=self.item):
                reports = runtestprotocol(self.item, log=False, nextitem=None)
            data = [config.hook.pytest_report_to_serializable(config=config, report=r) for r in reports]
            ours = {os.getpid(), *leaks.started_by(os.getpid(), leaks.tag())}
            left = leftovers.what_was_left(self._test_tmp, shm_before, ours, carry)
            if not keep:
                leftovers.remove(left, self._test_tmp)
            how = "a /dev/shm of its own" if why_shared is None else f"/dev/shm by a diff ({why_shared})"
            with open(self._results, "w", encoding="utf-8") as out:
                json.dump({"reports": data, "left": left.to_json(), "shm": how}, out)
        except BaseException:  # noqa: BLE001 - report through the exit code; the parent explains
            code = 3
        finally:
            os._exit(code)

    def _stretched(self) -> str:
        given = self.deadline - self.started
        return f" (stretched to {given:.0f} s for the machine's load)" if given > self.timeout_s + 0.5 else ""

    def grant_load_grace(self, progress: Callable[[str], None] | None = None) -> bool:
        """At the deadline: on a machine busier than its CPUs, move it later
        (:func:`load_grace_s`) and return True; else False (the test is killed)."""
        more = load_grace_s(self.timeout_s, self.deadline - self.started) if self.stretch else 0.0
        if more <= 0:
            return False
        self.deadline += more
        if progress is not None:
            progress(
                f"[harness] past its {self.timeout_s:g} s on a loaded machine, {more:.0f} s more: {self.item.nodeid}"
            )
        return True

    def abort(self) -> None:
        """Ctrl-C (or any error in this process): the test and all it started go now."""
        reap(self.pid, [])
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self._cleanup()

    def _cleanup(self, dumped: str = "") -> tuple[str, str]:
        """Remove the test's files; return its reports (JSON, as written) and
        ``dumped``, or else the stacks it dumped on its own, if any."""
        raw = ""
        with contextlib.suppress(OSError):
            with open(self._results, encoding="utf-8") as f:
                raw = f.read()
            os.unlink(self._results)
        if not dumped:
            dumped = collect_stacks([], self._stacks_dir)  # what the child dumped on its own
        shutil.rmtree(self._stacks_dir, ignore_errors=True)
        if not self.item.config.getoption("harness_keep_leftovers", False):
            shutil.rmtree(self._test_tmp, ignore_errors=True)
        if self._reaper is not None:
            self._reaper.unregister(self.pid)
        return raw, dumped

    def finish(self, status: int | None) -> list[pytest.TestReport]:
        """The reports, once the child exited with ``status``, or None: it ran
        past its deadline, and is killed now with its group."""
        item, pid = self.item, self.pid
        dumped = ""
        try:
            timed_out = status is None
            if timed_out:
                dumped = collect_stacks([pid, *_group_members(pid)], self._stacks_dir)
                _kill_group(pid, settle_s=0)
                _, status = os.waitpid(pid, 0)
            # Anything the test left in its group (workers) dies now; on a loaded
            # machine, processes on their way out get longer to finish on their own.
            self.settled_s = leftover_settle_s()
            leftover = _kill_group(pid, self.settled_s)
        except BaseException:
            self.abort()
            raise
        raw, dumped = self._cleanup(dumped)
        if timed_out:
            return [
                _synthetic(
                    item,
                    "call",
                    f"timed out after {self.timeout_s:g} s{self._stretched()}: killed with its process group "
                    f"(leftover processes: {leftover}).\nStacks at the timeout:\n{dumped}",
                )
            ]
        try:
            config = item.config
            written = json.loads(raw)
            if "error" in written:
                return [_synthetic(item, "setup", written["error"])]
            data, left, how = written["reports"], written["left"], written["shm"]
            reports = [config.hook.pytest_report_from_serializable(config=config, data=d) for d in data]
            for report in reports:
                if isinstance(report.longrepr, list):  # a skip's (path, line, reason), listed by JSON
                    report.longrepr = tuple(report.longrepr)
        except (ValueError, KeyError, TypeError):
            return [_synthetic(item, "call", f"the test process died (status {status}) before reporting.\n{dumped}")]
        if leftover:
            reports.append(
                _synthetic(
                    item,
                    "teardown",
                    f"processes left running {self.settled_s:.0f} s after the test's process ended, "
                    f"killed now: {leftover}",
                )
            )
        left["processes"] = len(leftover)
        if self.item.config.getoption("harness_keep_leftovers", False):
            left["kept"] = self._test_tmp
        reports[-1].user_properties += [(Prop.REMOVED, json.dumps(left)), (Prop.SHM, how)]
        for report in reports:  # a failure's note says so where the machine was busier than its CPUs
            report.user_properties.append((Prop.LOAD, f"{load_per_cpu():.1f}"))
        cpu = next((v for r in reports for k, v in r.user_properties if k == Prop.CPU), None)
        if cpu is not None:
            log_test_cpu(item.nodeid, json.loads(str(cpu)), {r.when: round(r.duration, 3) for r in reports})
        return reports


class _PhaseCpu:
    """In a test's own process: the CPU each phase of the test cost (this process,
    the workers it reaped, those still running), on the teardown report as
    :data:`Prop.CPU`, JSON by phase."""

    def __init__(self) -> None:
        self._last = cpu_so_far(())
        self._phases: dict[str, float] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> None:
        now = cpu_so_far(leaks.started_by(os.getpid(), leaks.tag()))
        self._phases[call.when] = round(now - self._last, 3)
        self._last = now
        if call.when == "teardown":
            item.user_properties.append((Prop.CPU, json.dumps(self._phases)))


def progress_every_s() -> float:
    """After this long, and as often again, a still-running test is named on the
    terminal: 30 s, or the seconds ``HARNESS_PROGRESS_S`` gives."""
    text = os.environ.get(PROGRESS_VARIABLE, "").strip()
    if not text:
        return 30.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise pytest.UsageError(
            f"Invalid {PROGRESS_VARIABLE} {text!r} from the environment variable {PROGRESS_VARIABLE}: "
            "expected a number of seconds > 0"
        )
    return seconds


def _wait_child(
    pid: int, timeout_s: float, nodeid: str = "", progress: Callable[[str], None] | None = None, stretch: bool = True
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
                more = load_grace_s(timeout_s, deadline - start) if stretch else 0.0
                if more <= 0:
                    return None
                deadline += more
                if progress is not None:
                    progress(f"[harness] past its {timeout_s:g} s on a loaded machine, {more:.0f} s more: {nodeid}")
            slice_s = min(deadline - now, progress_every_s() if progress else deadline - now)
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


#: How long what a test started may take to exit on its own once the test's
#: process has ended. Generous because it costs nothing where they do exit: a
#: process that outlives its parent by design (Python's fork server notices its
#: parent's end, then unloads torch) can take seconds on a loaded machine.
LEFTOVER_SETTLE_S = 5.0


def load_grace_s(timeout_s: float, allowed_s: float) -> float:
    """How much longer a test past its timeout may run because the machine is
    busier than its CPUs: its timeout stretched by the load per CPU (at most
    6 times), less what it has been given already; 0 on a machine no busier
    than its CPUs. The timeout is the suite's own guard against hangs, not a
    bound of SPEC's: a busy machine must not turn a slow test into a killed one."""
    stretched = timeout_s * load_scale(load_per_cpu())
    return max(0.0, stretched - allowed_s)


def leftover_settle_s() -> float:
    """How long a test's leftover processes get to exit on their own: 5 s, times
    the load per CPU where the machine is busier than its CPUs (the suite's own
    wait, not a bound of SPEC's: a busy machine must not turn a slow exit into a
    finding)."""
    return LEFTOVER_SETTLE_S * load_scale(load_per_cpu())


def _kill_group(pgid: int, settle_s: float = LEFTOVER_SETTLE_S) -> list[str]:
    """SIGKILL every process in the group, after ``settle_s`` s for them to exit
    on their own; return those that had not, as pid and command line."""
    deadline = time.monotonic() + settle_s
    while True:
        pids = _group_members(pgid)
        if not pids or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    described = [_describe(p) for p in pids]
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return described


def _describe(pid: int) -> str:
    """``pid`` with its command line, cut short: which of the test's processes it was."""
    import psutil

    try:
        cmdline = " ".join(psutil.Process(pid).cmdline())
    except (psutil.Error, OSError):
        cmdline = ""
    return f"{pid} ({cmdline[:120]})" if cmdline else str(pid)


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
    # A listed test's own failure may leave its processes behind (C12's workers run on): still that failure.
    known = _known_failure(item)
    report = pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords=dict.fromkeys(item.keywords, 1),
        outcome="skipped" if known else "failed",
        longrepr=f"[harness] {item.nodeid}: {message}",
        when=when,  # type: ignore[arg-type]
        user_properties=props,
    )
    if known:
        # A test a known-failures list names, killed or dead: its listed failure
        # (a hang, say), as pytest's xfail would have read it had the test ended itself.
        report.wasxfail = known  # type: ignore[attr-defined]
    return report


def _known_failure(item: pytest.Item) -> str | None:
    """The reason of the known-failure xfail ``harness.pytest_plugin.expected`` gave the item, if any."""
    from harness.pytest_plugin.expected import KNOWN_FAILURE

    marker = item.get_closest_marker("xfail")
    reason = str(marker.kwargs.get("reason", "")) if marker is not None else ""
    return reason if reason.startswith(KNOWN_FAILURE) else None


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
