"""C9/C10/C11/C18, MultiprocExecutor on CPUs: the CPU shared-memory
communicator's segments (vllm_dist_*-cpushm_*) stay in /dev/shm after
shutdown() whenever shutdown has to terminate a worker: here, one still busy
with a call; in the suite's runs, also workers slow to exit on a loaded machine."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C9'), ('vllm-mp', 'C10'), ('vllm-mp', 'C11'), ('vllm-mp', 'C18')]

import time

from tiny import dev_shm, executor, verdict


def busy(worker, seconds):
    time.sleep(seconds)
    return worker.rank


if __name__ == "__main__":
    before = dev_shm()
    ex = executor(tp=2)
    print("segments of the running executor:", sorted(n for n in dev_shm() - before if "vllm" in n))
    ex.collective_rpc(busy, args=(20,), non_block=True)
    time.sleep(1)
    ex.shutdown()
    time.sleep(3)
    left = sorted(dev_shm() - before)
    print("left in /dev/shm after shutdown():", left)
    verdict(any("vllm" in name for name in left), "shutdown() should unlink the executor's shared memory")
