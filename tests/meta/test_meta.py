"""The suite fails broken backends: each bug is caught by the clause it breaks, and only there."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (broken factory in tests/meta/broken.py, the clause its bug breaks, the tests to run)
CASES = [
    ("arrival_order", "C1", "c1_"),
    ("list_of_futures", "C4", "c4_"),
    ("swallowed_exception", "C6", "c6_"),
    ("spinning_thread", "C19", "c19_"),
    ("leaked_workers", "C9", "c9_shutdown_of_an_idle"),
    ("eager_callbacks", "C21", "c21_"),
    ("ignores_unique_rank", "C2", "c2_"),
    ("drops_kwargs", "C3", "c3_"),
    ("unordered_futures", "C5", "c5_a_later"),
    ("unordered_futures", "C5", "c5_futures_of_calls_with_kernels"),
    ("eager_callbacks", "C21", "c21_a_callback_added_while_kernels"),
    ("ignores_timeout", "C7", "c7_timeout_raises"),
    ("callbacks_twice", "C8", "c8_"),
    ("leaked_thread", "C10", "c10_"),
    ("leaked_descriptor", "C10", "c10_"),
    ("exit_keeps_running", "C11", "c11_with_block_shuts_down_on_exit"),
    ("kept_alive", "C12", "c12_"),
    ("shifted_ranks", "C14", "c14_"),
    ("isolated_groups", "C15", "c15_"),
    ("isolated_groups", "C16", "c16_ and float32"),
    ("shifted_ranks", "C16", "c16_greedy"),  # the shards by worker.rank, the gather by group rank
    ("truncated_payloads", "C17", "c17_a_64"),
    ("shared_singleton", "C18", "c18_"),
    ("pickle_error_in_future", "C20", "c20_unpicklable_argument"),
    ("ignores_init_failure", "C22", "c22_ and last"),
    ("listens_everywhere", "C23", "c23_"),
    ("no_parent_watch", "C13", "c13_"),
    # issue 9, clause sentences (results, futures, errors, bad input)
    ("narrowed_to_one_rank", "C2", "c2_every_rank"),
    ("timeout_returns_none", "C4", "c4_a_wait and result"),
    ("timeout_waits_too_long", "C4", "c4_a_wait and exception"),
    ("timeout_loses_the_future", "C4", "c4_a_wait and result"),
    ("rejects_result_timeout", "C4", "c4_"),
    ("silent_after_timeout", "C7", "c7_timeout_raises"),
    ("renamed_gloo", "C15", "c15_the_process_group"),
    ("callbacks_never_run", "C21", "c21_"),
    ("refuses_injection_early", "C22", "c22_ and last"),
    ("shared_reply_slot", "C24", "c24_blocking"),
    # worker death, hung workers, shutdown (branch faults-processes)
    ("death_seen_only_by_calls", "C8", "c8_a_worker_dying_while_idle"),
    ("first_callback_only", "C8", "c8_a_worker_dying_mid_call"),
    ("rank_order_replies", "C8", "c8_a_rank_killed_inside_a_collective and stay_blocked"),
    ("shutdown_by_sigterm", "C9", "c9_shutdown_is_bounded_with_a_worker_hung"),
    # processes the executor started, found by what they inherit (C9 leak check, C13, C23)
    ("detached_helper", "C13", "c13_"),
    ("scrubbed_helper", "C13", "c13_"),
    ("helper_listens_everywhere", "C23", "c23_"),
    ("helper_loose_shm", "C23", "c23_"),
    ("leaves_session_helper", "C9", "c9_shutdown_of_an_idle"),
    ("leaves_session_helper", "C9", "c1_blocking_call_returns"),  # the leak check after any test
    # what the executor's processes leave in their temporary folder and in /dev/shm (issue 25)
    ("leaves_a_socket_file", "C9", "c1_blocking_call_returns"),
    ("leaves_a_named_semaphore", "C9", "c1_blocking_call_returns"),
    # issue 26, no cheap green round 2: every word of SPEC.md, read as an adversary would
    ("callbacks_per_death", "C8", "c8_two_workers_dying"),
    ("bounded_descriptor_leak", "C10", "c10_"),
    ("process_wide_callbacks", "C18", "c18_a_worker_death"),
    ("shutdown_stops_every_executor", "C18", "c18_a_shutdown"),
    ("timeout_poisons_the_process", "C18", "c18_a_timeout"),
    ("sorted_replies", "C1", "c1_"),
    ("stale_replies_after_an_error", "C6", "c6_worker_exception_fails_that_call"),
    ("late_range_check", "C2", "c2_out_of_range and non_block"),
    ("exit_keeps_running_when_the_body_raises", "C11", "c11_with_block_shuts_down_when_the_body_raises"),
    ("truncated_results", "C17", "c17_large_results"),
    ("fails_first_pending_only", "C8", "c8_a_worker_dying_mid_call"),
    # issue 25, nothing left behind: the caller dies with calls in flight
    ("watches_only_between_calls", "C13", "c13_ and call_running"),
    ("blocked_on_a_full_reply_channel", "C13", "c13_ and replies_backed_up"),
    # issue 26, round 2: the "none yet" rows of docs/sentences.md
    ("pending_future_after_shutdown", "C9", "c9_shutdown_of_an_idle"),
    ("second_shutdown_runs_callbacks", "C9", "c9_shutdown_of_an_idle"),
    ("callbacks_get_an_equal_future", "C21", "c21_done_callback_runs"),
    ("drops_kwargs_of_string_methods", "C3", "c3_"),
    ("clamps_world_size", "C20", "c20_world_size"),
    ("unnamed_unknown_method", "C20", "c20_unknown_method"),
    # issue 26, round 3
    ("previous_calls_result", "C5", "c5_a_later"),
    ("blocking_takes_a_pending_reply", "C5", "c5_blocking"),
    ("unread_replies_block_new_calls", "C5", "c5_hundreds"),
    ("late_reply_to_the_next_call", "C7", "c7_timeout_raises"),
    ("unusable_after_an_unpicklable_result", "C20", "c20_unpicklable_result"),
    ("second_shutdown_stops_the_others", "C9", "c9_shutdown_of_an_idle"),
    # issue 28: pipeline parallelism with steps in flight
    ("narrowed_out_of_order", "C16", "c16_steps_in_flight"),
    ("narrowed_to_rank_zero", "C16", "c16_steps_in_flight"),
    # issue 29: what a chaos run's soak finds, as a clause of its own
    ("keeps_each_result", "C10", "c10_an_executor_keeps_nothing"),
    # C25: idle workers sleep (Ray compiled-graph workers at 100 % of a core while idle)
    ("spinning_workers", "C25", "c25_"),
    ("workers_spin_once_idle_a_while", "C25", "c25_"),
    # issue 51, round 3: every case a sentence's words reach
    ("exception_says_none", "C4", "c4_each_future_method"),
    ("done_when_sent", "C4", "c4_each_future_method"),
    ("narrowed_hides_other_ranks_errors", "C6", "c6_an_exception_on_a_rank"),
    ("late_reply_to_the_next_future", "C7", "c7_non_block_timeout"),
    ("callbacks_stop_at_a_raise", "C8", "c8_a_worker_dying_while_idle"),
    ("corrupts_large_results", "C17", "c17_large_results"),
    ("spins_once_idle_a_while", "C19", "c19_"),
    ("unloadable_result_breaks_the_executor", "C20", "c20_a_result_the_caller_cannot_load"),
    ("drops_none_replies", "C1", "c1_blocking_call_returns"),
    ("zero_timeout_waits", "C4", "c4_each_future_method"),
    ("stops_reading_at_the_first_error", "C6", "c6_worker_exception_fails_that_call"),
    ("pickles_exceptions_whole", "C6", "c6_an_exception_the_caller_cannot_load"),
    ("later_futures_hang_after_a_death", "C8", "c8_a_worker_dying_mid_call"),
    ("narrowed_waits_for_its_rank_only", "C8", "c8_a_worker_dying_mid_call"),
    ("large_arguments_block_after_a_death", "C8", "c8_a_worker_dying_mid_call"),
    ("spins_after_a_death", "C19", "c19_an_executor_whose_worker_died"),
    # issue 51's mutation run: a future that completes only when read
    ("done_only_once_read", "C4", "c4_each_future_method"),
]


#: What the failure of a case must say, where its test checks more than one thing
#: (by factory, or by (factory, -k) where a factory has several cases).
NAMED: dict[str | tuple[str, str], str] = {
    "narrowed_out_of_order": "the future of stream 1 step 0 completed before that of stream 0 step 0",
    "narrowed_to_rank_zero": "the future resolved to rank 0's reply (stage 0), expected rank 1's",
    "exception_says_none": "exception() of a call that failed with",
    "done_when_sent": "future.done() was True",
    "narrowed_hides_other_ranks_errors": "also where the reply is narrowed to another rank",
    "late_reply_to_the_next_future": "a blocking call after a timed-out call",
    "callbacks_stop_at_a_raise": "callback #1 raising",
    "corrupts_large_results": "the first difference at byte 25165824",
    "spins_once_idle_a_while": "after the last call returned",
    "workers_spin_once_idle_a_while": "after the last call returned",
    "unloadable_result_breaks_the_executor": "the call after collective_rpc(result_of_a_class_only_the_workers_have",
    "drops_none_replies": "every rank None",
    "zero_timeout_waits": "future.result(timeout=0)",
    "stops_reading_at_the_first_error": "the call after a failure on rank 0",
    "pickles_exceptions_whole": "expected an error carrying the worker's message",
    "later_futures_hang_after_a_death": "a non-blocking call after rank",
    "narrowed_waits_for_its_rank_only": "its reply narrowed to rank 0",
    "large_arguments_block_after_a_death": "a call with a 32 MiB argument after rank",
    "spins_after_a_death": "an executor whose rank",
    "done_only_once_read": "polled with nothing else waiting on the future",
}


# A backend that hangs fails the clause on the suite's own watchdog, within seconds,
# with the wait named: not on the run's per-test timeout.
HANGS = [
    ("hangs_after_shutdown", "C9", "c9_shutdown_of_an_idle", "a call after shutdown() did not return within 5 s"),
    (
        "health_check_hangs_after_a_death",
        "C8",
        "c8_a_worker_dying_while_idle",
        "check_health() after rank 1 died did not return within 10 s",
    ),
    (
        "shutdown_by_sigterm",
        "C9",
        "c9_shutdown_from_another_thread",
        "hung in native code did not return within 30 s",
    ),
    # Waited for while calls complete: callers that stall are told about 15 s after the last one.
    ("second_caller_hangs", "C24", "c24_blocking", "calls returned or completed (waited while calls completed"),
]


# They run as cases of test_the_suite_fails_a_backend_that_breaks_the_clause, in
# its shared runs, each failure's text named (NAMED).
CASES += [(factory, clause, k) for factory, clause, k, _ in HANGS]
NAMED.update({(factory, k): message for factory, _, k, message in HANGS})


#: The broken backends' bugs do not depend on how workers start; with fork they
#: start in milliseconds (the test process has torch loaded), where spawn
#: imports torch again in every worker of every test.
START_METHOD = "fork"


def conform(backend: str, k: str, tmp_path: Path, timeout: str = "120") -> tuple[int, dict[str, object]]:
    """The report of ``harness conform`` at world size 2 on the tests ``-k`` selects, and its exit code."""
    code, report, _ = _conform_output(backend, 2, k, tmp_path, timeout=timeout)
    return code, report


#: How many conform runs of broken backends go at once: they mostly wait
#: (timeouts, deaths, shutdown bounds), and each runs its tests side by side.
PARALLEL = int(os.environ.get("HARNESS_META_PARALLEL") or 4)
_REFERENCE = -1
#: The reference run's per-test timeout: a net for a hang of mp's, not a bound.
_REFERENCE_TIMEOUT_S = 900
#: Tests whose cases take longest (a killed caller's 10 s, shutdown bounds, 200
#: calls, a timed-out wait): they are dealt out first, one to each run, so that
#: no run ends long after the others.
_SLOW_FIRST = ("c13_", "c4_a_wait", "c5_hundreds", "c9_")


#: Cases of the conformant-but-unusual backends (PASSES) go in the same runs,
#: numbered from here.
_PASS_BASE = 10_000


#: Broken backends whose tests judge more than one clause (a gap that must read
#: as one clause's alone, the C13 states): (factory, -k), in the same runs,
#: numbered from _OWN_BASE; the tests that read each (OWN_READERS).
OWN = [
    ("rejects_result_timeout", "c4_ or c5_ or c18_ or c19_ or c21_"),
    ("futures_without_timeout", "c8_"),
    ("shifted_ranks", "c16_a_sharded and float32"),
    ("no_unique_reply_rank", "c2_ or c4_non_block or c17_"),
    ("watches_only_between_calls", "c13_"),
    ("blocked_on_a_full_reply_channel", "c13_"),
]
_OWN_BASE = 20_000
OWN_READERS = {
    "test_a_future_without_result_timeout_fails_c4_alone": "rejects_result_timeout",
    "test_c8_keeps_its_own_verdict_when_futures_reject_a_timeout": "futures_without_timeout",
    "test_ranks_that_take_each_others_shards_fail_the_decoder_check_with_the_rank_and_stage_named": "shifted_ranks",
    "test_a_backend_without_unique_reply_rank_fails_c2_alone": "no_unique_reply_rank",
}


def _own(factory: str) -> int:
    return _OWN_BASE + [f for f, _ in OWN].index(factory)


def _entry(i: int) -> tuple[str, str]:
    """(factory, -k) of case ``i``: one of CASES, of PASSES from _PASS_BASE on, of OWN from _OWN_BASE on."""
    if i >= _OWN_BASE:
        return OWN[i - _OWN_BASE]
    if i >= _PASS_BASE:
        factory, _, k = PASSES[i - _PASS_BASE]
        return factory, k
    return CASES[i][0], CASES[i][2]


def _start_order(i: int) -> tuple[bool, int]:
    """The slow cases first, then the rest."""
    return not any(slow in _entry(i)[1] for slow in _SLOW_FIRST), i


def _prefix(factory: str) -> str:
    return f"tests.meta.broken:{factory}"


def batches(cases: Sequence[int], runs: int) -> list[list[int]]:
    """``cases`` dealt out to ``runs`` conform runs, slow ones first, each to the
    shortest run; a factory at most once in a run (a run more where it is in all), so that each of its columns holds
    exactly the tests of one case. One run of many backends starts pytest, torch
    and the suite's collection once, not once per case (about 4 s of CPU each,
    for some 110 cases and side checks, on 2 cores)."""
    out: list[list[int]] = [[] for _ in range(runs)]
    for i in sorted(cases, key=_start_order):
        fits = [b for b in out if all(_entry(j)[0] != _entry(i)[0] for j in b)]
        if not fits:  # the factory is in every run already: one run more
            out.append([])
            fits = [out[-1]]
        min(fits, key=len).append(i)
    return [b for b in out if b]


def _batch_k(batch: Sequence[int]) -> str:
    """Each case's tests, on its own backend alone: its column's id in the test
    id is ``<backend>-ws2-<start method>``, which no other backend's contains."""
    return " or ".join(f"({_prefix(_entry(i)[0])}-ws2 and ({_entry(i)[1]}))" for i in batch)


def _own_columns(report: dict[str, object], factory: str) -> dict[str, object]:
    """The part of a run's report that is ``factory``'s: its columns alone."""
    own = f"{_prefix(factory)} "
    clauses = report["clauses"]  # type: ignore[index]
    return {
        "clauses": {
            c: {col: cell for col, cell in cells.items() if col.startswith(own)} for c, cells in clauses.items()
        },  # type: ignore[attr-defined]
        "failed": [f for f in report["failed"] if f"[{own}" in str(f)],  # type: ignore[attr-defined]
    }


@pytest.fixture(scope="module")
def case_reports(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, tuple[int, dict[str, object]] | BaseException]:
    """The conform runs of the selected cases (batched, several backends a run)
    and of the reference backend on all their tests, side by side."""
    wanted = set()
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        name = getattr(item, "originalname", "")
        if name == "test_the_suite_fails_a_backend_that_breaks_the_clause":
            wanted.add(int(item.callspec.params["i"]))  # type: ignore[attr-defined]
        elif name == "test_the_suite_passes_a_conformant_but_unusual_backend":
            wanted.add(_PASS_BASE + int(item.callspec.params["j"]))  # type: ignore[attr-defined]
        elif name == "test_c13_fails_exactly_the_states_in_which_the_workers_miss_the_callers_death":
            wanted.add(_own(item.callspec.params["factory"]))  # type: ignore[attr-defined]
        elif name in OWN_READERS:
            wanted.add(_own(OWN_READERS[name]))
        elif name == "test_the_reference_backend_passes_the_same_checks":
            wanted.add(_REFERENCE)

    def run(batch: list[int]) -> dict[int, tuple[int, dict[str, object]] | BaseException]:
        folder = tmp_path_factory.mktemp("run")
        try:
            if batch == [_REFERENCE]:
                # mp must pass every test: its tests' timeout is only a net for a
                # hang, not the bound a broken backend is judged by (120 s), and
                # it does not stretch with the load (an explicit one never does):
                # beside CI's other jobs, C10's 10,000 calls took longer than 120 s.
                every = " or ".join(f"({k})" for _, _, k in CASES)
                return {_REFERENCE: conform("mp", every, folder, timeout=str(_REFERENCE_TIMEOUT_S))}
            backends = ",".join(_prefix(_entry(i)[0]) for i in batch)
            code, report = conform(backends, _batch_k(batch), folder)
            return {i: (code, _own_columns(report, _entry(i)[0])) for i in batch}
        except BaseException as exc:  # noqa: BLE001 - the cases' own tests report it
            return dict.fromkeys(batch, exc)

    # Once, here: threads that each found no base folder yet would each make
    # one, and a green run removes only the one pytest kept.
    tmp_path_factory.getbasetemp()
    runs = ([[_REFERENCE]] if _REFERENCE in wanted else []) + batches(sorted(wanted - {_REFERENCE}), PARALLEL)
    reports: dict[int, tuple[int, dict[str, object]] | BaseException] = {}
    with concurrent.futures.ThreadPoolExecutor(len(runs) or 1) as pool:
        for part in pool.map(run, runs):
            reports.update(part)
    return reports


def _case(reports: dict[int, tuple[int, dict[str, object]] | BaseException], i: int) -> tuple[int, dict[str, object]]:
    outcome = reports[i]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


@pytest.mark.timeout(3600)  # the first test waits for every case's run
@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[1]}-{c[0]}" for c in CASES])
def test_the_suite_fails_a_backend_that_breaks_the_clause(
    case_reports: dict[int, tuple[int, dict[str, object]] | BaseException], i: int
) -> None:
    factory, clause, _ = CASES[i]
    code, report = _case(case_reports, i)
    outcomes = {col: cell["outcome"] for col, cell in report["clauses"][clause].items()}  # type: ignore[index]
    assert code != 0, f"conform exited 0 for a backend that breaks {clause}"
    assert "FAIL" in outcomes.values(), f"{clause} is {outcomes} for {factory}, expected FAIL"
    named = NAMED.get((factory, CASES[i][2])) or NAMED.get(factory)
    if named is not None:
        text = json.dumps(report["clauses"][clause])  # type: ignore[index]
        assert named in text, f"{factory}: the failure does not name what is wrong: {text[:3000]}"


def test_the_cases_are_dealt_out_once_each_and_no_run_holds_a_factory_twice() -> None:
    """A run's column of a factory must hold one case's tests alone: a case whose
    bug went unseen must not borrow another case's FAIL."""
    for runs in (1, 4, 200):
        dealt = batches(range(len(CASES)), runs)
        assert sorted(i for b in dealt for i in b) == list(range(len(CASES)))
        for b in dealt:
            factories = [_entry(i)[0] for i in b]
            assert len(factories) == len(set(factories)), f"a factory twice in one run: {factories}"
    assert _own_columns(
        {"clauses": {"C11": {"tests.meta.broken:exit_keeps_running_when_the_body_raises ws2 cpu": {}}}, "failed": []},
        "exit_keeps_running",
    )["clauses"] == {"C11": {}}


@pytest.mark.timeout(3600)
def test_the_reference_backend_passes_the_same_checks(
    case_reports: dict[int, tuple[int, dict[str, object]] | BaseException],
) -> None:
    code, report = _case(case_reports, _REFERENCE)
    failed = report["failed"]
    assert code == 0 and not failed, f"mp failed {failed}"


# ---- issue 9, clause sentences: no more than SPEC, one gap one clause, no hang ----

# (conformant-but-unusual factory in tests/meta/broken.py, the clauses it must pass, the tests to run)
PASSES = [
    ("names_its_own_parameter", ("C20",), "c20_world_size"),
    ("thread_completed_futures", ("C21",), "c21_"),
    ("frozen_workers", ("C2", "C3"), "c2_ or c3_"),
    ("process_wide_monitor", ("C9", "C11", "C18"), "c9_shutdown_of_an_idle or c11_ or c18_"),
    ("spins_after_each_call", ("C25",), "c25_"),
]


def _cell_outcomes(report: dict[str, object], clause: str) -> dict[str, str]:
    cells = report["clauses"].get(clause, {})  # type: ignore[attr-defined]
    return {col: cell["outcome"] for col, cell in cells.items()}


def _verdicts(report: dict[str, object], clause: str) -> dict[str, str]:
    """The outcome of each test of ``clause`` that ran (``-k`` leaves the others
    "not run", which a cell rightly shows), by test."""
    cells = report["clauses"].get(clause, {})  # type: ignore[attr-defined]
    return {
        f"{col}: {t['test']}": t["outcome"]
        for col, cell in cells.items()
        for t in cell["tests"]
        if t["note"] != "filtered out"
    }


@pytest.mark.timeout(3600)  # its runs are the broken backends' (case_reports)
@pytest.mark.parametrize("j", range(len(PASSES)), ids=[f"{'+'.join(p[1])}-{p[0]}" for p in PASSES])
def test_the_suite_passes_a_conformant_but_unusual_backend(
    case_reports: dict[int, tuple[int, dict[str, object]] | BaseException], j: int
) -> None:
    factory, clauses, _ = PASSES[j]
    _, report = _case(case_reports, _PASS_BASE + j)
    for clause in clauses:
        verdicts = _verdicts(report, clause)
        assert verdicts and set(verdicts.values()) == {"pass"}, f"{clause}: {verdicts} for {factory}, expected pass"
    # Not the exit code: a -k run that leaves a clause's other tests out reads
    # "not run" for it, and a run with every cell "not run" exits non-zero.
    assert not report["failed"], f"conform failed {report['failed']} for {factory}"


@pytest.mark.timeout(600)
def test_leftovers_a_second_start_proved_the_processs_get_no_second_start_again(tmp_path: Path) -> None:
    # One test at a time: the first test's second start proves the monitor thread
    # the process's; the tests after it reuse that proof (harness.pytest_plugin.residue).
    extra = ("--jobs", "1")
    code, report, _ = _conform_output("tests.meta.broken:process_wide_monitor", 2, "c1_ or c3_", tmp_path, extra=extra)
    notes = [t["note"] for c in ("C1", "C3") for cell in report["clauses"][c].values() for t in cell["tests"]]  # type: ignore[index]
    first_start = [n for n in notes if n.startswith("left for good by the backend's first start (not a leak")]
    reused = [n for n in first_start if "as a second start after test_" in n]
    assert len(first_start) >= 3 and len(first_start) - len(reused) == 1, first_start
    assert code == 0 and not report["failed"], report["failed"]


@pytest.mark.timeout(600)
def test_leftovers_a_second_start_left_again_are_a_leak_with_no_second_start_again(tmp_path: Path) -> None:
    # One test at a time: the first test's second start leaves the socket files
    # again (a leak, every start); the tests after it that leave no more reuse that.
    extra = ("--jobs", "1")
    code, report, _ = _conform_output("tests.meta.broken:leaves_a_socket_file", 2, "c1_ or c3_", tmp_path, extra=extra)
    notes = [t["note"] for cell in report["clauses"]["C9"].values() for t in cell["tests"] if t["outcome"] == "FAIL"]  # type: ignore[index]
    reused = [n for n in notes if "(as the second start after test_" in n]
    assert len(notes) >= 3 and len(notes) - len(reused) == 1, notes
    assert all("files left in the temporary folder" in n for n in notes), notes
    assert code != 0


def _own_report(
    reports: dict[int, tuple[int, dict[str, object]] | BaseException], factory: str
) -> tuple[bool, dict[str, object]]:
    """``factory``'s part of the shared runs (OWN), and whether it failed anything
    (the run's exit code is every backend's of its run)."""
    _, report = _case(reports, _own(factory))
    return bool(report["failed"]), report


@pytest.mark.timeout(3600)  # its run is one of the broken backends' (case_reports)
def test_a_future_without_result_timeout_fails_c4_alone(
    case_reports: dict[int, tuple[int, dict[str, object]] | BaseException],
) -> None:
    failed, report = _own_report(case_reports, "rejects_result_timeout")
    assert "FAIL" in _cell_outcomes(report, "C4").values(), f"C4 is {_cell_outcomes(report, 'C4')}, expected FAIL"
    for clause in ("C5", "C18", "C19", "C21"):
        verdicts = _verdicts(report, clause)
        assert verdicts and set(verdicts.values()) == {"pass"}, (
            f"{clause}: {verdicts} for a backend whose only gap is C4's result(timeout), expected pass"
        )
    assert failed


@pytest.mark.timeout(600)
def test_a_future_that_never_completes_fails_within_the_suites_own_bounds(tmp_path: Path) -> None:
    # A harness timeout well above the suite's own bound on the wait (60 s):
    # the clause fails, named, on that bound, not when the test is killed.
    import time

    start = time.monotonic()
    code, report = conform("tests.meta.broken:never_completes", "c21_done_callback_runs_once", tmp_path, "200")
    took = time.monotonic() - start
    assert "FAIL" in _cell_outcomes(report, "C21").values(), f"C21 is {_cell_outcomes(report, 'C21')}, expected FAIL"
    assert took < 180, f"conform took {took:.0f} s: the test waited out the harness timeout"
    assert code != 0


# ---- worker death, hung workers, shutdown (C8-C12; branch faults-processes) -----------


def _conform_output(
    backend: str,
    world_size: int,
    k: str,
    tmp_path: Path,
    start_method: str = START_METHOD,
    extra: Sequence[str] = (),
    timeout: str = "120",
    needs_report: bool = True,
) -> tuple[int, dict[str, object], str]:
    """Like ``conform``, at any world size, with ``extra`` options and the run's
    output too; the report is ``{}`` where none was written and none was needed."""
    report = tmp_path / "report.json"
    args = ["--backend", backend, "--world-size", str(world_size), "--start-method", start_method, "-k", k]
    # The meta tests judge the CPU tier: GPU tests are left out, not shown "not run".
    args += ["-m", "not gpu", *extra, "--report-json", str(report), "--timeout", timeout]
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "conform", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = proc.stdout + proc.stderr
    if not needs_report and not report.exists():
        return proc.returncode, {}, output
    assert report.exists(), f"no report written; output:\n{output[-6000:]}"
    return proc.returncode, json.loads(report.read_text()), output


def _outcomes(report: dict[str, object], clause: str) -> dict[str, str]:
    return {col: cell["outcome"] for col, cell in report["clauses"][clause].items()}  # type: ignore[index]


@pytest.mark.timeout(3600)  # its run is one of the broken backends' (case_reports)
def test_c8_keeps_its_own_verdict_when_futures_reject_a_timeout(
    case_reports: dict[int, tuple[int, dict[str, object]] | BaseException],
) -> None:
    """A C4 gap (``result(timeout)`` not implemented) is no C8 failure, nor a C8 pass
    earned by the stub's error: the backend meets C8, and C8 reads pass."""
    _, report = _own_report(case_reports, "futures_without_timeout")
    outcomes = _outcomes(report, "C8")
    assert outcomes and set(outcomes.values()) == {"pass"}, (
        f"C8 is {outcomes}, expected pass; {_verdicts(report, 'C8')}"
    )


@pytest.mark.timeout(600)
def test_c12_is_not_applicable_where_every_rank_runs_in_the_caller(tmp_path: Path) -> None:
    _, report, output = _conform_output("uni", 1, "c12_", tmp_path, "spawn")
    outcomes = _outcomes(report, "C12")
    assert outcomes and set(outcomes.values()) == {"not applicable"}, (
        f"C12 is {outcomes} for uni, expected not applicable; {output[-3000:]}"
    )


@pytest.mark.timeout(3600)  # its run is one of the broken backends' (case_reports)
def test_ranks_that_take_each_others_shards_fail_the_decoder_check_with_the_rank_and_stage_named(
    case_reports: dict[int, tuple[int, dict[str, object]] | BaseException],
) -> None:
    # worker.rank is the next group rank's: every shard is there once, so only the
    # logits, gathered in group-rank order, come out wrong.
    failed, report = _own_report(case_reports, "shifted_ranks")
    notes = [t["note"] for cell in report["clauses"]["C16"].values() for t in cell["tests"] if t["outcome"] == "FAIL"]  # type: ignore[attr-defined]
    assert failed and notes, f"C16 did not fail for shifted_ranks: {report['clauses']['C16']}"  # type: ignore[index]
    for rank in (0, 1):
        assert f"rank {rank}, logits: largest error" in notes[0], notes[0]
    assert "replay with --harness-seed 0" in notes[0], notes[0]


@pytest.mark.timeout(3600)  # its run is one of the broken backends' (case_reports)
def test_a_backend_without_unique_reply_rank_fails_c2_alone(
    case_reports: dict[int, tuple[int, dict[str, object]] | BaseException],
) -> None:
    failed, report = _own_report(case_reports, "no_unique_reply_rank")
    assert "FAIL" in _cell_outcomes(report, "C2").values(), f"C2 is {_cell_outcomes(report, 'C2')}, expected FAIL"
    for clause in ("C4", "C17"):
        verdicts = _verdicts(report, clause)
        assert verdicts and set(verdicts.values()) <= {"pass", "blocked by C2"}, (
            f"{clause}: {verdicts} for a backend whose only gap is C2's unique_reply_rank, expected pass or blocked"
        )
    assert failed


# Each C13 state is a check of its own: a backend that misses the caller's death
# in one state fails that state's check, and passes the others.
C13_STATES = [
    ("watches_only_between_calls", {"call_running", "worker_hung_in_native_code"}),
    ("blocked_on_a_full_reply_channel", {"replies_backed_up"}),
]


@pytest.mark.timeout(3600)  # its run is one of the broken backends' (case_reports)
@pytest.mark.parametrize(("factory", "failing"), C13_STATES, ids=[c[0] for c in C13_STATES])
def test_c13_fails_exactly_the_states_in_which_the_workers_miss_the_callers_death(
    case_reports: dict[int, tuple[int, dict[str, object]] | BaseException], factory: str, failing: set[str]
) -> None:
    _, report = _own_report(case_reports, factory)
    verdicts = _verdicts(report, "C13")
    by_state = {name.rsplit("[", 1)[-1].rstrip("]").split("-")[-1]: outcome for name, outcome in verdicts.items()}
    assert len(by_state) == 4, f"C13: {verdicts}, expected a verdict for each of the four states"
    assert {s for s, o in by_state.items() if o == "FAIL"} == failing, f"C13: {by_state} for {factory}"
    assert {o for s, o in by_state.items() if s not in failing} == {"pass"}, f"C13: {by_state} for {factory}"
