"""C9/C10/C11/C18, MultiprocExecutor on CPUs: the CPU shared-memory
communicator's segments (vllm_dist_*-cpushm_*) stay in /dev/shm after
shutdown(), one set per executor (here, after three)."""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C9'), ('vllm-mp', 'C10'), ('vllm-mp', 'C11'), ('vllm-mp', 'C18')]

import time

from tiny import dev_shm, executor, verdict

if __name__ == "__main__":
    before = dev_shm()
    for _ in range(3):
        ex = executor(tp=2)
        ex.collective_rpc("get_model")  # any call
        ex.shutdown()
    time.sleep(3)
    left = sorted(dev_shm() - before)
    print("left in /dev/shm after three executors shut down:", left)
    verdict(any("vllm" in name for name in left), "shutdown() should unlink the executor's shared memory")
