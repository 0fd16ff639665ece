"""C9, MultiprocExecutor: a worker hung in native code with SIGTERM ignored
outlives shutdown(): it is neither killed nor reaped."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C9')]

import ctypes
import os
import signal
import threading
import time

from tiny import executor, verdict


def pid(worker):
    return os.getpid()


def hang_in_c_on_rank_1(worker):
    if worker.rank != 1:
        return worker.rank
    libc = ctypes.CDLL(None)
    libc.signal(int(signal.SIGTERM), ctypes.c_void_p(1))  # SIG_IGN, process-wide
    read_end, write_end = os.pipe()
    os.read(read_end, 1)  # nobody writes: blocks in C for good


def alive(p):
    try:
        with open(f"/proc/{p}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


if __name__ == "__main__":
    ex = executor(tp=2)
    pids = ex.collective_rpc(pid)
    ex.collective_rpc(hang_in_c_on_rank_1, non_block=True)
    time.sleep(2)
    start = time.monotonic()
    t = threading.Thread(target=ex.shutdown, daemon=True)
    t.start()
    t.join(60)
    print(f"shutdown() {'returned' if not t.is_alive() else 'still running'} after {time.monotonic() - start:.1f} s")
    time.sleep(5)
    left = [p for p in pids if alive(p)]
    print("worker processes alive 5 s later:", left)
    for p in left:
        os.kill(p, signal.SIGKILL)
    verdict(bool(left) or t.is_alive(), "shutdown() should end every worker, hung or not, within its bound")
