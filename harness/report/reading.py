"""A JSON report read back (``--report-json``), for ``report diff``, the HTML page
and ``verify``: a file that is missing, is not JSON or is not a harness report is
one error that names the file and what is wrong with it."""

from __future__ import annotations

import json
from pathlib import Path

from harness.report import OUTCOMES, ClauseMatrix


class ReportError(ValueError):
    """A report that cannot be read: names the file and why."""


def read_report(path: str | Path) -> ClauseMatrix:
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ReportError(f"{where}: not a JSON report (not UTF-8 text: {exc.reason} at byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{where}: not a JSON report ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("clauses"), dict):
        raise ReportError(f"{where}: not a harness report (no 'clauses'; write one with conform --report-json)")
    try:
        return ClauseMatrix.from_json(data)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ReportError(
            f"{where}: a harness report with a cell it cannot read ({type(exc).__name__}: {exc})"
        ) from None
    except ValueError as exc:
        raise ReportError(f"{where}: {exc} (outcomes are {', '.join(OUTCOMES)})") from None
