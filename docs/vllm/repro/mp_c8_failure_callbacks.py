"""C8, MultiprocExecutor: register_failure_callback keeps only the last callback:
when a worker dies, the earlier ones never run."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C8')]

import os
import signal
import time

from tiny import executor, verdict


def pid(worker):
    return os.getpid()


if __name__ == "__main__":
    ex = executor(tp=2)
    ran = []
    for i in range(3):
        ex.register_failure_callback(lambda i=i: ran.append(i))
    os.kill(ex.collective_rpc(pid)[1], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(ran) < 3:
        time.sleep(0.2)
    print("callbacks that ran:", ran)
    ex.shutdown()
    verdict(sorted(ran) != [0, 1, 2], "each of the three callbacks should run once")
