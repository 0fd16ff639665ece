"""C12, MultiprocExecutor: dropping the last reference does not stop the
workers: weakref.finalize(self, self.shutdown) holds the executor through its
bound method, so it is never collected."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C12')]

import gc
import os
import time
import weakref

from tiny import executor, verdict


def pid(worker):
    return os.getpid()


if __name__ == "__main__":
    ex = executor(tp=2)
    pids = ex.collective_rpc(pid)
    ref = weakref.ref(ex)
    del ex
    gc.collect()
    time.sleep(10)
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
    print("executor collected:", ref() is None, "- workers alive 10 s after the drop:", alive)
    verdict(bool(alive), "dropping the executor should stop its workers")
