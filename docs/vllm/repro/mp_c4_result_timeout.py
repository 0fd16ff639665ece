"""C4, MultiprocExecutor: the future of a non_block call does not take a timeout:
result(timeout=...) raises RuntimeError("timeout not implemented")."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C4')]

from tiny import executor, verdict


def rank(worker):
    return worker.rank


if __name__ == "__main__":
    ex = executor(tp=2)
    future = ex.collective_rpc(rank, non_block=True)
    try:
        got = f"returned {future.result(timeout=30)!r}"
    except Exception as exc:
        got = f"raised {exc!r}"
    print("future.result(timeout=30):", got)
    ex.shutdown()
    verdict(got != "returned [0, 1]", "Future.result(timeout) should wait up to the timeout")
