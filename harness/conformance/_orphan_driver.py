"""A caller process for C13: builds an executor, prints its worker pids, then waits to be killed.

Run as ``python -m harness.conformance._orphan_driver BACKEND WORLD_SIZE START_METHOD PID_FILE``;
the pids go to a file (written whole, then renamed), not stdout, which a backend may log to.
"""

from __future__ import annotations

import json
import os
import sys
import time

from harness import ExecutorConfig, load_backend
from harness.conformance import probes


def main() -> None:
    spec, world_size, start_method, pid_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    ex = load_backend(spec).factory(ExecutorConfig(world_size, start_method=start_method))
    pids = [int(p) for p in ex.collective_rpc(probes.pid)]
    with open(pid_file + ".tmp", "w", encoding="utf-8") as f:
        json.dump(pids, f)
    os.replace(pid_file + ".tmp", pid_file)
    time.sleep(3600)


if __name__ == "__main__":
    main()
