"""C7, MultiprocExecutor: after a call times out, its late reply is read as the
next call's result."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C7')]

import time

from tiny import executor, verdict


def slow_on_last_rank(worker, value):
    if worker.rank == 1:
        time.sleep(4)
    return value


if __name__ == "__main__":
    ex = executor(tp=2)
    try:
        ex.collective_rpc(slow_on_last_rank, args=("late",), timeout=1)
        print("the call did not time out")
    except TimeoutError as exc:
        print("timed out:", repr(exc))
    time.sleep(5)  # the late reply arrives
    got = [ex.collective_rpc(slow_on_last_rank, args=(f"call {i}",), timeout=20) for i in range(2)]
    print("the next two calls returned:", got)
    ex.shutdown()
    verdict(got != [["call 0"] * 2, ["call 1"] * 2], "a later call should never get the timed-out call's reply")
