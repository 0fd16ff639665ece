"""Each test's own log, one file per test (``--harness-test-logs DIR``): a
conformance submission's evidence, read without the whole run's log.

Every phase's report of a test (setup, call, teardown) is appended to
``DIR/<test id>.log``: its outcome and duration, the failure's whole text, and
what the test printed (pytest's captured sections). Under xdist the controller
writes them, from the reports its workers send.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from harness.verdicts import Prop

__all__ = ["TestLogs", "log_name"]


def log_name(nodeid: str) -> str:
    """A file name for a test id: its characters outside [A-Za-z0-9_.,=+-] become '_'."""
    name = re.sub(r"[^A-Za-z0-9_.,=+\[\]-]+", "_", nodeid).strip("_")
    return (name[:200] or "test") + ".log"


class TestLogs:
    """A plugin object: writes each report into its test's log."""

    __test__ = False  # a plugin, not a test class

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        lines = [f"== {report.when}: {report.outcome} in {report.duration:.2f} s"]
        longrepr: Any = report.longrepr
        if longrepr:
            lines.append(str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr))
        for title, content in report.sections:
            lines += [f"-- {title}", content.rstrip("\n")]
        for key, value in report.user_properties:
            if key == Prop.NOTE:
                lines.append(f"-- note: {value}")
        with open(self.folder / log_name(report.nodeid), "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
