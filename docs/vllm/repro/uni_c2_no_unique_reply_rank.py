"""C2, UniProcExecutor: collective_rpc takes no unique_reply_rank."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-uni', 'C2')]

from tiny import executor, verdict


def rank(worker):
    return worker.rank


if __name__ == "__main__":
    ex = executor(tp=1, backend="uni")
    try:
        got = f"returned {ex.collective_rpc(rank, unique_reply_rank=0)!r}"
    except Exception as exc:
        got = f"raised {exc!r}"
    print("collective_rpc(rank, unique_reply_rank=0):", got)
    ex.shutdown()
    verdict(got != "returned 0", "unique_reply_rank=0 should return rank 0's reply alone")
