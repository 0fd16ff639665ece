"""What the `ray` backend's caller burns while it waits, and what an empty call costs.

Run: ``python tests/perf/ray_caller_wait.py`` (needs Ray). On a local cluster
of this machine, one executor at world size 2 prints the caller's CPU over a
call that sleeps 3 s in every rank (as % of one core: Ray's own channel read
spins through such a wait; the executor polls after a short spin) and the
median and 90th percentile of an empty call, the figure the poll must not
cost (README, "`ray` against `mp`").
"""

from __future__ import annotations

import os
import statistics
import time

from harness.perf.workloads import time_calls


def main() -> None:
    from harness.executors.ray import local_cluster

    with local_cluster(4) as env:
        os.environ.update(env)
        from harness import ExecutorConfig
        from harness.conformance import probes
        from harness.executors.ray import create

        with create(ExecutorConfig(2)) as ex:
            for _ in range(2):
                wall, cpu = time.monotonic(), time.process_time()
                ex.collective_rpc(probes.sleep, args=(3.0,))
                share = (time.process_time() - cpu) / (time.monotonic() - wall)
                print(f"caller's CPU over a 3 s call: {share:6.1%} of a core")
            times = time_calls(lambda: ex.collective_rpc(probes.rank), 2000, 200)
            deciles = statistics.quantiles(times, n=10)
            print(f"empty call: median {statistics.median(times) * 1e6:7.1f} us, p90 {deciles[8] * 1e6:7.1f} us")


if __name__ == "__main__":
    main()
