"""C7, UniProcExecutor: timeout is not enforced. A blocking call runs past it
without TimeoutError; a non_block call's future completes with the result."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-uni', 'C7')]

import time

from tiny import executor, verdict


def sleep_then(worker, seconds, value):
    time.sleep(seconds)
    return value


if __name__ == "__main__":
    ex = executor(tp=1, backend="uni")
    seen = []
    for non_block in (False, True):
        start = time.monotonic()
        try:
            out = ex.collective_rpc(sleep_then, args=(4, "late"), timeout=1, non_block=non_block)
            got = f"returned {out.result() if non_block else out!r}"
        except Exception as exc:
            got = f"raised {exc!r}"
        seen.append(got)
        print(f"non_block={non_block}, timeout=1, a 4 s call: {got} after {time.monotonic() - start:.1f} s")
    ex.shutdown()
    verdict(not all(s.startswith("raised TimeoutError") for s in seen), "a call past its timeout should raise TimeoutError")
