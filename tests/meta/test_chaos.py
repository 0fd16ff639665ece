"""Proof of power of ``python -m harness chaos``: told nothing of what to look for,
a 60 s run finds each of these broken backends within its time, names the clause
the bug breaks, and shrinks the operations that led to it to a handful."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.system.load import load_scale
from tests.chaos.runs import chaos

pytestmark = pytest.mark.chaos

#: (broken factory in tests/meta/broken.py, the clause a chaos run must name)
FOUND = [
    ("late_reply_to_the_next_call", "C7"),  # a stale reply after a timeout
    ("stale_replies_after_an_error", "C6"),  # stale replies after a worker's error
    ("unordered_futures", "C5"),  # futures completing out of order
    ("death_seen_only_by_calls", "C8"),  # a death never noticed while no call meets it
    ("keeps_each_result", "C10"),  # every result kept alive (the soak)
]
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
    code, report, out = chaos(tmp_path, *args, "--duration", str(DURATION_S), "--seed", "0", bound_s=540 + shrink)
    assert code == 1, f"exit {code}, expected 1 (a violation found):\n{out[-3000:]}"
    found = report["findings"][0]
    assert found["clause"] == clause, f"the run named {found['clause']}, expected {clause}:\n{out[-3000:]}"
    # Found within the run's own time (the soak's judgement comes at its end; a
    # busy machine may stretch the soak until it has the calls to be judged).
    assert found["found_after_s"] <= (DURATION_S + 10) * load_scale(), out[-3000:]
    assert len(found["operations"]) <= MOST_OPERATIONS, f"shrunk to {len(found['operations'])} operations:\n{out}"
    if found["steps"]:
        assert found["replayed"] == "failed again", out[-3000:]
    assert f"VIOLATION of {clause}" in out and report["replay"] in out
