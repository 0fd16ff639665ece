"""C7, MultiprocExecutor: after the future of a non_block call times out, the late
replies of that call are read as the next blocking call's result."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C7')]

import threading
import time

from tiny import executor, verdict


def slow_on_rank_0(worker, seconds):
    if worker.rank == 0:
        time.sleep(seconds)
    return "late"


def echo(worker, value):
    return value


if __name__ == "__main__":
    ex = executor(tp=2)
    future = ex.collective_rpc(slow_on_rank_0, args=(4.0,), timeout=1.0, non_block=True)
    seen = []

    def wait():  # the future takes no result(timeout): wait in a thread, bounded below
        try:
            seen.append(f"returned {future.result()!r}")
        except BaseException as exc:
            seen.append(f"raised {exc!r}")

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(30)
    print("the timed-out future:", seen[0] if seen else "still waiting after 30 s", flush=True)
    try:
        got = ex.collective_rpc(echo, args=("fine",), timeout=30)
    except Exception as exc:
        got = exc
    print("the next blocking call:", repr(got), flush=True)
    ex.shutdown()
    verdict(got != ["fine", "fine"], "the next call should return ['fine', 'fine'], never the timed-out call's reply")
