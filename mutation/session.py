"""Edits of a cosmic-ray session database for ``make mutation`` (docs/mutation.md).

``sample DB N --seed S``: leave a seeded random N of the pending mutants pending and
mark the others skipped ("left out of the sample"), so ``cosmic-ray exec`` runs N.
``summary DB``: the counts (killed, of which timed out; survived; skipped) and
the survivors, each with its file:line, operator and job id.
``reset-survivors DB [JOB_ID ...]``: forget the results of the surviving mutants
(or of the named ones), so the next ``cosmic-ray exec`` runs them again.

Run with the python of the venv cosmic-ray is installed in (.venv-mutation).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
from contextlib import closing

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

LEFT_OUT = "Left out of the sample"


def sample(db_path: str, size: int, seed: int) -> int:
    """Keep ``size`` pending mutants, chosen with ``seed``; skip the rest. Returns how many were skipped."""
    with use_db(db_path, WorkDB.Mode.open) as db:
        pending = sorted(item.job_id for item in db.pending_work_items)
        kept = set(random.Random(seed).sample(pending, min(size, len(pending))))
        left_out = [job_id for job_id in pending if job_id not in kept]
        if left_out:
            db.set_multiple_results(left_out, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output=LEFT_OUT))
        print(f"{len(pending)} pending mutants: {len(kept)} kept (seed {seed}), {len(left_out)} left out")
        return len(left_out)


def summary(db_path: str) -> None:
    """Print the counts of a session and its survivors."""
    with use_db(db_path, WorkDB.Mode.open) as db:
        total = db.num_work_items
        done = list(db.completed_work_items)
        pending = total - len(done)
    skipped = [result for _, result in done if result.worker_outcome == WorkerOutcome.SKIPPED]
    left_out = sum(1 for result in skipped if result.output == LEFT_OUT)
    run = [(item, result) for item, result in done if result.worker_outcome != WorkerOutcome.SKIPPED]
    killed = [result for _, result in run if result.test_outcome == TestOutcome.KILLED]
    timed_out = sum(1 for result in killed if result.output == "timeout")
    survivors = sorted(
        (item for item, result in run if result.test_outcome == TestOutcome.SURVIVED),
        key=lambda item: (str(item.mutations[0].module_path), item.mutations[0].start_pos),
    )
    other = len(run) - len(killed) - len(survivors)
    print(f"mutants: {total}; skipped: {len(skipped) - left_out} by operator, {left_out} left out of the sample")
    print(
        f"run: {len(run)}; killed: {len(killed)} ({timed_out} of them timed out); survived: {len(survivors)}; "
        f"incompetent or abnormal: {other}; pending: {pending}"
    )
    if run:
        print(f"score: {len(killed)}/{len(run)} killed = {100 * len(killed) / len(run):.1f} %")
    for item in survivors:
        mutation = item.mutations[0]
        print(
            f"SURVIVED {mutation.module_path}:{mutation.start_pos[0]} {mutation.operator_name} "
            f"occurrence {mutation.occurrence} job {item.job_id}"
        )


def reset_survivors(db_path: str, job_ids: list[str]) -> int:
    """Delete the results of the named mutants, or of every survivor. Returns how many were reset."""
    with use_db(db_path, WorkDB.Mode.open) as db:
        survivors = {job_id for job_id, result in db.results if result.test_outcome == TestOutcome.SURVIVED}
    chosen = job_ids or sorted(survivors)
    unknown = sorted(set(chosen) - survivors)
    if unknown:
        print(f"not survivors of this session: {', '.join(unknown)}", file=sys.stderr)
        return -1
    # WorkDB has no call that forgets a result: its table, as cosmic-ray 8 keeps it.
    with closing(sqlite3.connect(db_path)) as connection, connection:
        connection.executemany("DELETE FROM work_results WHERE job_id = ?", [(job_id,) for job_id in chosen])
    print(f"reset {len(chosen)} survivor(s): the next cosmic-ray exec runs them again")
    return len(chosen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    sampling = commands.add_parser("sample", help="keep a seeded random N of the pending mutants")
    sampling.add_argument("db")
    sampling.add_argument("size", type=int)
    sampling.add_argument("--seed", type=int, default=1)
    summarising = commands.add_parser("summary", help="the counts and the survivors")
    summarising.add_argument("db")
    resetting = commands.add_parser("reset-survivors", help="run the survivors (or the named ones) again")
    resetting.add_argument("db")
    resetting.add_argument("job_ids", nargs="*")
    args = parser.parse_args(argv)
    if args.command == "sample":
        sample(args.db, args.size, args.seed)
        return 0
    if args.command == "summary":
        summary(args.db)
        return 0
    return 0 if reset_survivors(args.db, args.job_ids) >= 0 else 1


if __name__ == "__main__":
    sys.exit(main())
