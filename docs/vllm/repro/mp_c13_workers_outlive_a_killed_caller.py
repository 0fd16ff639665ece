"""C13, MultiprocExecutor: when the caller process is SIGKILLed with a call
running in the workers, the workers are still running 10 s later (the suite saw
them outlive it for good, spinning, and also when idle, now and then)."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C13')]

import json
import os
import signal
import subprocess
import sys
import time

from tiny import executor, verdict


def pid(worker):
    return os.getpid()


def sleep_an_hour(worker):
    time.sleep(3600)


def caller(pid_file):
    """The caller: an executor, its workers' pids to a file, then a call that runs for an hour."""
    ex = executor(tp=2)
    pids = ex.collective_rpc(pid)
    ex.collective_rpc(sleep_an_hour, non_block=True)
    time.sleep(2)  # the workers are in the call by now
    with open(pid_file + ".tmp", "w") as f:
        json.dump(pids, f)
    os.replace(pid_file + ".tmp", pid_file)
    time.sleep(3600)


def alive(p):
    try:
        with open(f"/proc/{p}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


if __name__ == "__main__":
    if len(sys.argv) > 1:
        caller(sys.argv[1])
        sys.exit(0)
    pid_file = f"/tmp/c13-repro-{os.getpid()}.json"
    child = subprocess.Popen([sys.executable, __file__, pid_file])
    deadline = time.monotonic() + 300
    while not os.path.exists(pid_file) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    if not os.path.exists(pid_file):
        child.kill()
        verdict(False, f"the caller did not start its workers (exit {child.poll()})")
    with open(pid_file) as f:
        workers = json.load(f)
    os.unlink(pid_file)
    child.kill()  # SIGKILL, mid-call
    child.wait()
    time.sleep(10)
    left = [p for p in workers if alive(p)]
    print("workers 10 s after their caller was SIGKILLed mid-call:", left or "all gone")
    for p in left:
        os.kill(p, signal.SIGKILL)
    verdict(bool(left), "every process the executor started should exit within 10 s of its caller's death")
