"""C7, MultiprocExecutor: a call whose 32 MiB request a stopped worker (SIGSTOP)
cannot read times out as it should; but once the worker is resumed, its reply to
that call is read as the next call's result."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C7')]

import os
import signal
import time

from tiny import executor, verdict


def payload(worker, data):
    return (worker.rank, len(data), data[:8])


def echo(worker, value):
    return value


if __name__ == "__main__":
    ex = executor(tp=2)
    pid = ex.workers[1].proc.pid
    os.kill(pid, signal.SIGSTOP)
    start = time.monotonic()
    try:
        first = ex.collective_rpc(payload, args=(b"Z" * (32 << 20),), timeout=1.0)
    except Exception as exc:
        first = exc
    print(f"the call with rank 1 stopped, after {time.monotonic() - start:.1f} s:", repr(first)[:120], flush=True)
    os.kill(pid, signal.SIGCONT)
    time.sleep(3.0)  # rank 1 reads the request and replies to it
    try:
        got = ex.collective_rpc(echo, args=("fine",), timeout=30)
    except Exception as exc:
        got = exc
    print("the next call:", repr(got)[:120], flush=True)
    ex.shutdown()
    verdict(got != ["fine", "fine"], "the next call should return ['fine', 'fine'], never the timed-out call's reply")
