"""Proof of power of ``python -m harness chaos``: told nothing of what to look for,
a run of 400 operations (about 60 s on a quiet machine) finds each of these
broken backends, names the clause the bug breaks, and shrinks the operations that
led to it to a handful; its replay line finds it again at the same operation.

A budget of operations, not of seconds: a loaded machine runs fewer operations
in a minute, and CI's 60 s run of ``death_seen_only_by_calls`` stopped at
operation 242, where seed 0 first kills an idle worker at operation 273. The
seeded schedule is the same on any machine (tests/unit/test_chaos_budget.py);
seed 0 finds the others at operations 99 to 109, and the soak finds C10."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.system.load import load_scale
from tests.chaos_runs import chaos

pytestmark = pytest.mark.chaos

#: (broken factory in tests/meta/broken.py, the clause a chaos run must name)
FOUND = [
    ("late_reply_to_the_next_call", "C7"),  # a stale reply after a timeout
    ("stale_replies_after_an_error", "C6"),  # stale replies after a worker's error
    ("unordered_futures", "C5"),  # futures completing out of order
    ("death_seen_only_by_calls", "C8"),  # a death never noticed while no call meets it
    ("keeps_each_result", "C10"),  # every result kept alive (the soak)
]
#: The schedule's budget; the soak gets its share of DURATION_S after it.
OPERATIONS = 400
DURATION_S = 60
#: What the shrunk sequence may hold at most (the executor's start included).
MOST_OPERATIONS = 10
#: Shrinking stops when no chunk can go, long before this on a quiet machine (the
#: death case: 6 replays, 60 s). Under make test's side jobs each of its replays
#: waited 25 s for C8's callback and a 60 s budget allowed one: CI's run kept 25
#: operations. The budget is room, not a target; it also stretches with the load.
SHRINK_S = 240
MOST_SHRINK_S = 900


@pytest.mark.timeout(1600)
@pytest.mark.parametrize(("factory", "clause"), FOUND, ids=[f for f, _ in FOUND])
def test_a_chaos_run_finds_the_broken_backend_names_the_clause_and_shrinks_the_sequence(
    factory: str, clause: str, tmp_path: Path
) -> None:
    backend = f"tests.meta.broken:{factory}"
    # Shrinking replays the operations: a busy machine makes each replay slower, so
    # its budget (60 s on a quiet one) stretches with the load, as the suite's waits do.
    shrink = min(MOST_SHRINK_S, round(SHRINK_S * load_scale()))
    args = ["--backend", backend, "--world-size", "2", "--start-method", "fork", "--shrink-time", str(shrink)]
    budget = ["--duration", str(DURATION_S), "--operations", str(OPERATIONS), "--seed", "0"]
    code, report, out = chaos(tmp_path, *args, *budget, bound_s=540 + shrink)
    assert code == 1, f"exit {code}, expected 1 (a violation found):\n{out[-3000:]}"
    found = report["findings"][0]
    assert found["clause"] == clause, f"the run named {found['clause']}, expected {clause}:\n{out[-3000:]}"
    # Found within the schedule's budget (the soak's finding: at its end).
    assert 1 <= found["at_operation"] <= OPERATIONS, out[-3000:]
    assert f"--operations {found['at_operation']}" in report["replay"], report["replay"]
    assert len(found["operations"]) <= MOST_OPERATIONS, f"shrunk to {len(found['operations'])} operations:\n{out}"
    if found["steps"]:
        assert found["replayed"] == "failed again", out[-3000:]
    assert f"VIOLATION of {clause}" in out and report["replay"] in out


@pytest.mark.timeout(600)
def test_a_findings_replay_line_finds_it_again_at_the_same_operation(tmp_path: Path) -> None:
    backend = "tests.meta.broken:late_reply_to_the_next_call"
    args = ["--backend", backend, "--world-size", "2", "--start-method", "fork", "--seed", "0"]
    code, first, out = chaos(tmp_path, *args, "--operations", str(OPERATIONS), bound_s=540)
    assert code == 1, f"exit {code}, expected 1 (a violation found):\n{out[-3000:]}"
    found = first["findings"][0]
    replay = first["replay"].split()
    assert replay[:4] == ["python", "-m", "harness", "chaos"] and "--operations" in replay, first["replay"]
    again_dir = tmp_path / "again"
    again_dir.mkdir()
    code, again, out = chaos(again_dir, *replay[4:], bound_s=540)
    assert code == 1, f"the replay {first['replay']} exited {code}, expected 1:\n{out[-3000:]}"
    refound = again["findings"][0]
    assert (refound["clause"], refound["at_operation"]) == (found["clause"], found["at_operation"]), out[-3000:]
    # The replay stops at the finding's operation: it runs no further.
    assert again["operations_budget"] == found["at_operation"], again
