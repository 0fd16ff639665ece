"""A chaos run as the tests start it: ``python -m harness chaos`` in a process group
of its own, killed with everything it started if it outlives its bound."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.bounded import run_bounded

ROOT = Path(__file__).resolve().parents[1]


def chaos(tmp_path: Path, *args: str, bound_s: float) -> tuple[int, dict[str, Any], str]:
    """Exit code, JSON report and printed text of one chaos run."""
    report = tmp_path / "chaos.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    code, out = run_bounded(
        [sys.executable, "-m", "harness", "chaos", *args, "--json", str(report)],
        bound_s=bound_s,
        what=f"the chaos run {' '.join(args)}",
        cwd=tmp_path,
        env=env,
    )
    loaded = json.loads(report.read_text()) if report.exists() else {}
    return code, loaded, out
