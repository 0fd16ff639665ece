"""C20, MultiprocExecutor: after a call to an unknown method name fails, the next
call gets that call's error again (a leftover reply of the failed call): the
executor is not usable after bad input."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C20')]

from tiny import executor, verdict


def rank(worker):
    return worker.rank


if __name__ == "__main__":
    ex = executor(tp=2)
    try:
        got = f"returned {ex.collective_rpc('no_such_method_xyz')!r}"
    except Exception as exc:
        got = f"raised {exc!r}"
    print("collective_rpc('no_such_method_xyz'):", got)
    try:
        after = ex.collective_rpc(rank, timeout=30)
    except Exception as exc:
        after = exc
    print("the next call:", repr(after))
    ex.shutdown()
    verdict("no_such_method_xyz" not in got or after != [0, 1], "the error should name the method, the executor stay usable")
