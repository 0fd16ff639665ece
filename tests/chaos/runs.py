"""A chaos run as the tests start it: ``python -m harness chaos`` in a process group
of its own, killed with everything it started if it outlives its bound."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def chaos(tmp_path: Path, *args: str, bound_s: float) -> tuple[int, dict[str, Any], str]:
    """Exit code, JSON report and printed text of one chaos run."""
    report = tmp_path / "chaos.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "chaos", *args, "--json", str(report)],
        cwd=tmp_path,
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
        what = " ".join(args)
        raise AssertionError(f"the chaos run {what} did not end within {bound_s:g} s:\n{out[-4000:]}") from None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left in its group
        except ProcessLookupError:
            pass
    loaded = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, loaded, out
