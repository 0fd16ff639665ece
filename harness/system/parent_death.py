"""A signal from the kernel when the process that started this one dies.

``PR_SET_PDEATHSIG`` needs no thread of ours to run, so it holds even in
native code that keeps the GIL or ignores SIGTERM: the workers of ``mp`` and
its fork server, the pytest that ``harness conform`` runs and the holders of
simulated nodes each arm it, each with the signal its owner's death calls for.
The kernel watches the parent *thread*; arm it only where that thread lives as
long as its process. Linux only: elsewhere nothing is armed.
"""

from __future__ import annotations

import ctypes
import signal
import sys

__all__ = ["signal_on_parent_death"]

_PR_SET_PDEATHSIG = 1


def signal_on_parent_death(signum: int = signal.SIGKILL) -> bool:
    """Have the kernel send ``signum`` to this process when its parent dies;
    whether it was armed. Safe between fork and exec (one ``prctl``, no lock)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        status: int = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):
        return False
    return status == 0
