"""C6, MultiprocExecutor: when a blocking call raises on rank 0 only, rank 1's reply
to it is left unread, and the next blocking call returns it as rank 1's result."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C6')]

from tiny import executor, verdict


def raise_on_rank_0(worker):
    if worker.rank == 0:
        raise ValueError("boom on rank 0")
    return worker.rank


def echo(worker, value):
    return value


if __name__ == "__main__":
    ex = executor(tp=2)
    try:
        print("first call returned", repr(ex.collective_rpc(raise_on_rank_0, timeout=30)))
    except Exception as exc:
        print("first call raised", repr(exc))
    try:
        got = ex.collective_rpc(echo, args=("fine",), timeout=30)
    except Exception as exc:
        got = exc
    print("second call:", repr(got))
    ex.shutdown()
    verdict(got != ["fine", "fine"], "the second call should return ['fine', 'fine']")
