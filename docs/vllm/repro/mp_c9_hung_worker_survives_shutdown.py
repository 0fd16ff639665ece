"""C9, MultiprocExecutor: after shutdown() with a worker hung in native code
(SIGTERM ignored), the workers are not all gone: still running, or exited but
never reaped (zombies of the caller)."""

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


def state(p):
    """'running', 'zombie' (exited, not reaped) or None (gone)."""
    try:
        with open(f"/proc/{p}/stat") as f:
            return "zombie" if f.read().rsplit(") ", 1)[1][0] == "Z" else "running"
    except FileNotFoundError:
        return None


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
    left = {p: state(p) for p in pids if state(p)}
    print("worker processes 5 s later:", left or "all gone")
    for p, how in left.items():
        if how == "running":
            os.kill(p, signal.SIGKILL)
    verdict(bool(left) or t.is_alive(), "shutdown() should end every worker, hung or not, within its bound")
