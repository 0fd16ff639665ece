"""C20, MultiprocExecutor: after a call whose result cannot be pickled fails,
the next call gets that call's error again (a leftover reply of the failed
call): the executor is not usable after it."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C20')]

import threading

from tiny import executor, verdict


def lock(worker):
    return threading.Lock()


def rank(worker):
    return worker.rank


if __name__ == "__main__":
    ex = executor(tp=2)
    try:
        got = f"returned {ex.collective_rpc(lock, timeout=30)!r}"
    except Exception as exc:
        got = f"raised {exc!r}"
    print("a call returning a lock:", got)
    try:
        after = ex.collective_rpc(rank, timeout=30)
    except Exception as exc:
        after = exc
    print("the next call:", repr(after))
    ex.shutdown()
    verdict(after != [0, 1], "the executor should stay usable after an unpicklable result")
