"""A caller process for C13: builds an executor, prints its worker pids, then waits to be killed.

Run as ``python -m harness.conformance._orphan_driver BACKEND WORLD_SIZE START_METHOD``.
"""

from __future__ import annotations

import json
import sys
import time

from harness import ExecutorConfig, load_backend, probes


def main() -> None:
    spec, world_size, start_method = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ex = load_backend(spec).factory(ExecutorConfig(world_size, start_method=start_method))
    pids = [int(p) for p in ex.collective_rpc(probes.pid)]
    print(json.dumps(pids), flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
