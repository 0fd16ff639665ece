"""The ranks' processes as the caller's machine sees them: what the fault and
leak checks kill, watch and count.

Each rank reports its pid and PID namespace (``probes.process``); a rank on a
simulated node is found by both in this machine's ``/proc``
(``harness.system.pids``). A rank on another machine (a real cluster's node)
cannot be killed or watched from here: such a check reads not run, saying so.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.conformance import probes
from harness.conformance._checks import bounded
from harness.system.pids import visible

__all__ = ["worker_pids"]


def worker_pids(executor: Any) -> list[int]:
    """Each rank's pid, as this process sees it, in rank order."""
    reported = bounded(lambda: executor.collective_rpc(probes.process), 60, "collective_rpc(process)")
    found = []
    for rank, (pid, namespace) in enumerate(reported):
        seen = visible(int(pid), int(namespace))
        if seen is None:
            pytest.skip(
                f"rank {rank} runs on another machine (its pid {pid} is of a PID namespace not in sight here): "
                "this check kills or watches its process, and cannot from here"
            )
        found.append(seen)
    return found
