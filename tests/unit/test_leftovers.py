"""What a test's processes leave is named against that test, counted, and removed:
a /dev/shm of the test's own where the platform allows it, else a diff."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from harness.system import leftovers

LEAVES = """
import os
import tempfile
from multiprocessing import shared_memory

import _multiprocessing
import pytest

from harness.conformance import probes


@pytest.mark.harness_clause("C1")
def test_leaves_things(executor, world_size):
    assert executor.collective_rpc(probes.rank) == list(range(world_size))
    # What an executor's processes might leave: a segment, a named semaphore, a file.
    segment = shared_memory.SharedMemory(name=f"meta_left_{os.getpid()}", create=True, size=1 << 20)
    segment.close()
    from multiprocessing import resource_tracker
    resource_tracker.unregister(segment._name, "shared_memory")  # nobody will unlink it
    _multiprocessing.SemLock(1, 1, 1, f"/meta-left-{os.getpid()}", False)
    with open(os.path.join(tempfile.gettempdir(), "left.txt"), "w") as f:
        f.write("x")
"""


def _in_a_child(body: str) -> dict[str, object]:
    """Run ``body`` (Python, setting ``out``) in a forked child; what it set."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        scope: dict[str, object] = {}
        try:
            exec(body, {"leftovers": leftovers, "os": os}, scope)
            data = json.dumps(scope.get("out"))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            data = json.dumps({"error": repr(exc)})
        os.write(w, data.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = json.loads(f.read())
    os.waitpid(pid, 0)
    return got  # type: ignore[no-any-return]


@pytest.mark.skipif(os.geteuid() != 0, reason="a private /dev/shm needs root (mount namespaces)")
def test_a_private_dev_shm_holds_the_test_s_segments_and_goes_with_it(tmp_path: Path) -> None:
    name = f"harness_unit_private_{os.getpid()}"
    got = _in_a_child(
        f"""
why = leftovers.enter_private_shm()
open("/dev/shm/{name}", "w").close()
left = leftovers.what_was_left({str(tmp_path)!r}, None)
out = {{"why": why, "segments": sorted(left.segments), "host_sees": None}}
"""
    )
    assert got["why"] is None, got
    assert got["segments"] == [name], got  # everything there is the test's
    assert not os.path.exists(f"/dev/shm/{name}"), "the test's segment reached the machine's /dev/shm"


def test_without_a_private_dev_shm_the_test_s_own_new_segments_are_found_by_a_diff(tmp_path: Path) -> None:
    name = f"harness_unit_diff_{os.getpid()}"
    before = leftovers.leaks.shm_segments(include_semaphores=True)
    try:
        with open(f"/dev/shm/{name}", "wb") as f:
            f.write(b"x" * 4096)
        open(f"/dev/shm/sem.{name}", "w").close()
        (tmp_path / "a.sock").write_text("")
        (tmp_path / "pytest-of-root").mkdir()  # pytest's own: never the backend's
        left = leftovers.what_was_left(str(tmp_path), before)
        assert left.segments == {name: 4096}
        assert left.semaphores == [f"sem.{name}"]
        assert left.files == ["a.sock"]
        assert left.to_json() == {"segments": 1, "bytes": 4096, "semaphores": 1, "files": 1, "processes": 0}
        leftovers.remove(left, str(tmp_path))
        assert not os.path.exists(f"/dev/shm/{name}") and not os.path.exists(f"/dev/shm/sem.{name}")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["pytest-of-root"]
    finally:
        for path in (f"/dev/shm/{name}", f"/dev/shm/sem.{name}"):
            if os.path.exists(path):
                os.unlink(path)


# Runs argv[2:] in a /dev/shm of its own, as an isolated test gets one, and
# writes what it held at the end to argv[1]; exit status 90 where it could not
# have one. The folders of the machine's /dev/shm are carried into it, as
# isolation carries them: a checkout or venv there stays in sight.
_IN_A_SHM_OF_ITS_OWN = """
import os, subprocess, sys
from harness.system.leftovers import enter_private_shm
carry = tuple(n for n in os.listdir("/dev/shm") if os.path.isdir(os.path.join("/dev/shm", n)))
why = enter_private_shm(carry)
if why is not None:
    print(why, file=sys.stderr)
    sys.exit(90)
rc = subprocess.run(sys.argv[2:]).returncode
with open(sys.argv[1], "w") as out:
    out.write("\\n".join(os.listdir("/dev/shm")))
sys.exit(rc)
"""


def _run_in_a_shm_of_its_own(pytester: pytest.Pytester, args: list[str]) -> tuple[pytest.RunResult, list[str]]:
    """The run, kept, in a mount namespace with a /dev/shm of its own (a fresh
    tmpfs), and what that /dev/shm held when it ended. What it keeps there for
    debugging stays out of the machine's /dev/shm, where a run beside it that
    tells its own leftovers by a diff (Ray's ranks write to the machine's) would
    count them as its own, and remove them. Where namespaces are not allowed
    (not root), the machine's."""
    if os.geteuid() != 0:
        result = pytester.runpytest_subprocess(*args)
        return result, os.listdir("/dev/shm")
    listing = pytester.path / "shm-listing.txt"
    pytest_cmd = [sys.executable, "-m", "pytest", f"--basetemp={pytester.path / 'basetemp'}", *args]
    result = pytester.run(sys.executable, "-c", _IN_A_SHM_OF_ITS_OWN, str(listing), *pytest_cmd)
    assert result.ret != 90, f"no tmpfs on /dev/shm in the run's namespace: {result.errlines[-5:]}"
    return result, listing.read_text().split()


@pytest.mark.timeout(300)
# The kept run has a /dev/shm of its own; in the test process, the runs beside
# this one in the same pytest run (a Ray graph's semaphores) keep off it.
@pytest.mark.harness_exclusive
@pytest.mark.parametrize("keep", [False, True], ids=["removed", "kept"])
def test_what_a_test_left_is_reported_per_backend_and_removed_unless_kept(
    pytester: pytest.Pytester, keep: bool
) -> None:
    pytester.makepyfile(test_leaves=LEAVES)
    report = pytester.path / "report.json"
    args = ["--harness-backend", "mp", "--harness-world-size", "1", "--harness-start-method", "fork"]
    args += ["--harness-report-json", str(report), "-p", "no:cacheprovider"]
    if keep:
        result, shm = _run_in_a_shm_of_its_own(pytester, [*args, "--harness-keep-leftovers"])
    else:
        result, shm = pytester.runpytest_subprocess(*args), os.listdir("/dev/shm")
    pid_names = [n for n in shm if n.startswith(("meta_left_", "sem.meta-left-"))]
    try:
        matrix = json.loads(report.read_text())
        # The test body (not the executor: C9's verdict is not this test's point) left them.
        assert matrix["removed"]["mp"]["segments"] == 1 and matrix["removed"]["mp"]["bytes"] >= 1 << 20
        assert matrix["removed"]["mp"]["semaphores"] == 1 and matrix["removed"]["mp"]["files"] == 1
        result.stdout.fnmatch_lines(["*mp left 1 shared-memory segments (1.0 MB), 1 named semaphores*"])
        if keep:
            assert len(pid_names) == 2, pid_names  # kept on the run's /dev/shm for debugging
            [kept] = [line.split(": ", 1)[1] for line in result.outlines if line.startswith("temporary folders kept: ")]
            assert os.path.exists(os.path.join(kept, "left.txt"))
            shutil.rmtree(kept)
        else:
            assert pid_names == [], f"left on the machine: {pid_names}"
    finally:
        for name in pid_names:
            with contextlib.suppress(FileNotFoundError):  # in a namespace that is gone
                os.unlink(f"/dev/shm/{name}")


def _report(props: list[tuple[str, object]], outcome: str) -> pytest.TestReport:
    return pytest.TestReport(
        nodeid="t.py::test_x[mp-ws2-fork]",
        location=("t.py", 1, "test_x"),
        keywords={},
        outcome=outcome,  # type: ignore[arg-type]
        longrepr="AssertionError: the call did not fail within 10 s" if outcome == "failed" else None,
        when="call",
        user_properties=props,
    )


@pytest.mark.parametrize(("load", "says_loaded"), [("3.5", True), ("0.4", False)])
def test_a_failure_on_a_machine_busier_than_its_cpus_says_so(load: str, says_loaded: bool) -> None:
    from harness.pytest_plugin.options import Options
    from harness.pytest_plugin.outcomes import MatrixCollector
    from harness.report import ClauseMatrix
    from harness.verdicts import Prop

    matrix = ClauseMatrix()
    opts = Options(["mp"], [2], ["fork"], {}, 300.0, True, {})
    collector = MatrixCollector(matrix, opts, None)  # type: ignore[arg-type]
    props: list[tuple[str, object]] = [
        ("harness_clauses", "C8"),
        ("harness_backend", "mp"),
        ("harness_column", "mp ws2 cpu"),
        ("harness_test", "test_x[mp-ws2-fork]"),
        ("harness_variant", "mp-ws2-fork"),
        (Prop.LOAD, load),
    ]
    collector.pytest_runtest_logreport(_report(props, "failed"))
    [result] = matrix.cells[("C8", "mp ws2 cpu")]
    assert result.outcome == "FAIL"
    assert ("the machine was loaded: 3.5 runnable per CPU" in result.note) is says_loaded, result.note


@pytest.mark.parametrize(
    ("load", "given", "more"),
    [(0.5, 60.0, 0.0), (1.0, 60.0, 0.0), (3.0, 60.0, 120.0), (3.0, 180.0, 0.0), (50.0, 60.0, 300.0)],
)
def test_a_test_s_timeout_stretches_with_the_load_at_most_six_times(
    monkeypatch: pytest.MonkeyPatch, load: float, given: float, more: float
) -> None:
    from harness.pytest_plugin import isolation

    monkeypatch.setattr(isolation, "load_per_cpu", lambda: load)
    assert isolation.load_grace_s(60.0, given) == more
