"""One test of every clause: what ``harness conform --sample`` runs.

For a run that must be short (CI's run of vLLM's executors, the load check in
``tests/meta/test_load.py``): every clause is checked once, by the test whose
waits a busy machine stretches first. The report lists the other tests as not
run, filtered out. Each entry is a part of one test's name, as ``-k`` reads it, or
parts joined by `` and `` (C13: one state of the caller's death, the one vLLM's
executor fails most often; each state starts an executor of its own).
"""

from __future__ import annotations

__all__ = ["SAMPLE", "sample_expression"]

SAMPLE: tuple[str, ...] = (
    "c1_blocking_call_returns",
    "c2_unique_reply_rank_returns",
    "c3_args_and_kwargs_reach_a_callable",
    "c4_a_wait_with_timeout",
    "c5_hundreds_of_calls",
    "c6_worker_exception_fails_that_call",
    "c7_timeout_raises_in_time",
    "c8_a_worker_dying_mid_call",
    "c9_shutdown_is_bounded_with_a_worker_hung",
    "c10_ten_create",
    "c11_with_block_shuts_down_on_exit",
    "c12_dropping",
    "c13_every_process and call_running",
    "c14_worker_rank",
    "c15_collectives_are_correct",
    "c16_greedy",
    "c17_a_64",
    "c18_two_executors_at_once",
    "c19_idle",
    "c20_unpicklable_argument",
    "c21_done_callback_runs_once",
    "c22_a_worker_failing",
    "c23_nothing_listens",
    "c24_blocking_calls",
    "c25_idle",
)


def sample_expression(k: str | None = None) -> str:
    """The ``-k`` expression of the sample, narrowed by ``k`` where one is given."""
    expression = " or ".join(f"({part})" for part in SAMPLE)
    return f"({expression}) and ({k})" if k else expression
