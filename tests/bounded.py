"""A command the tests run as a process of its own (``python -m harness ...``):
in a process group of its own, killed with everything it started if it
outlives its bound, and the test failing with what it printed until then."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path


def run_bounded(argv: Sequence[str], *, bound_s: float, what: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Exit code and printed text (stdout and stderr) of ``argv``. Past
    ``bound_s`` its group is SIGKILLed and an AssertionError says ``what`` did
    not end, with the last of its output: which of its steps were done and which ran."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # a process outside the group holds the pipe
            proc.kill()
            out = "(its output could not be read: a process it started outside its group holds the pipe)"
        raise AssertionError(f"{what} did not end within {bound_s:g} s:\n{out[-6000:]}") from None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left in its group
        except ProcessLookupError:
            pass
    return proc.returncode, out
