"""C2, MultiprocExecutor: an out-of-range unique_reply_rank is not a ValueError
before anything is sent. world_size raises IndexError; -1 waits for good."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C2')]

import threading

from tiny import executor, verdict


def rank(worker):
    return worker.rank


if __name__ == "__main__":
    ex = executor(tp=2)
    seen = {}
    for bad in (2, -1):
        def call(bad=bad):
            try:
                seen[bad] = f"returned {ex.collective_rpc(rank, unique_reply_rank=bad)!r}"
            except Exception as exc:
                seen[bad] = f"raised {exc!r}"

        t = threading.Thread(target=call, daemon=True)
        t.start()
        t.join(20)
        print(f"unique_reply_rank={bad}:", seen.get(bad, "still waiting after 20 s"))
    ok = all(v.startswith("raised ValueError") for v in seen.values()) and len(seen) == 2
    verdict(not ok, "out-of-range unique_reply_rank should raise ValueError at the call")
