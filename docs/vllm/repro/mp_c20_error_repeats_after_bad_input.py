"""C20, MultiprocExecutor: after a call fails on bad input (an unknown method
name, a result that cannot be pickled), the next call gets that call's error
again (a leftover reply of the failed call): the executor is not usable after it."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C20')]

import threading

from tiny import executor, verdict


def lock(worker):
    return threading.Lock()


def rank(worker):
    return worker.rank


if __name__ == "__main__":
    unusable = []
    for what, bad in (("an unknown method name", "no_such_method_xyz"), ("a result that cannot be pickled", lock)):
        ex = executor(tp=2)
        try:
            got = f"returned {ex.collective_rpc(bad, timeout=30)!r}"
        except Exception as exc:
            got = f"raised {exc!r}"
        try:
            after = ex.collective_rpc(rank, timeout=30)
        except Exception as exc:
            after = exc
        print(f"{what}: {got}\n  the next call: {after!r}", flush=True)
        ex.shutdown()
        if after != [0, 1]:
            unusable.append(what)
    verdict(bool(unusable), f"the executor should stay usable after {' and after '.join(unusable) or 'bad input'}")
