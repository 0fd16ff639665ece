"""C6, MultiprocExecutor: when a non_block call raises on one rank, the next
call's future gets the failed call's leftover reply from the other rank."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C6')]

from tiny import executor, verdict


def raise_on_rank_0(worker):
    if worker.rank == 0:
        raise ValueError("boom")
    return worker.rank


def echo(worker, value):
    return value


if __name__ == "__main__":
    ex = executor(tp=2)
    bad = ex.collective_rpc(raise_on_rank_0, non_block=True)
    good = ex.collective_rpc(echo, args=("fine",), non_block=True)
    try:
        print("first future:", bad.result())
    except Exception as exc:
        print("first future raised", repr(exc))
    try:
        got = good.result()
    except Exception as exc:
        got = exc
    print("second future:", repr(got))
    ex.shutdown()
    verdict(got != ["fine", "fine"], "the second future should resolve to ['fine', 'fine']")
