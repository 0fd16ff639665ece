"""C9/C11, UniProcExecutor: a call after shutdown() runs and returns instead of raising."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-uni', 'C9'), ('vllm-uni', 'C11')]

from tiny import executor, verdict


def rank(worker):
    return worker.rank


if __name__ == "__main__":
    ex = executor(tp=1, backend="uni")
    ex.shutdown()
    try:
        got = f"returned {ex.collective_rpc(rank)!r}"
    except Exception as exc:
        got = f"raised {exc!r}"
    print("a call after shutdown():", got)
    verdict(got.startswith("returned"), "a call after shutdown() should raise")
