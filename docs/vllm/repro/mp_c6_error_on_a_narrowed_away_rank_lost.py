"""C6, MultiprocExecutor: a call narrowed with unique_reply_rank=1 returns rank 1's
result when the callable raised on rank 0: the exception on rank 0 is lost, blocking
or non_block."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C6')]

from tiny import executor, verdict


def raise_on_rank_0(worker):
    if worker.rank == 0:
        raise ValueError("boom on rank 0")
    return worker.rank


if __name__ == "__main__":
    ex = executor(tp=2)
    lost = []
    for form in ("blocking", "non_block"):
        try:
            if form == "blocking":
                got = ex.collective_rpc(raise_on_rank_0, unique_reply_rank=1, timeout=30)
            else:
                got = ex.collective_rpc(raise_on_rank_0, unique_reply_rank=1, non_block=True).result()
            print(f"{form}: returned {got!r}", flush=True)
            lost.append(form)
        except Exception as exc:
            print(f"{form}: raised {exc!r}", flush=True)
    ex.shutdown()
    verdict(bool(lost), f"the call should fail when rank 0 raised ({' and '.join(lost) or 'every'} form returned instead)")
