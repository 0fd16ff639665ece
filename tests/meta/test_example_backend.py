"""The example backend of docs/implementers.md (examples/pipes.py) passes every clause it
does not declare: the sample (one test of every clause, ``conform --sample``) at world size 2,
the smallest run that still reaches each clause."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import CLAUSES, load_backend
from tests.meta.test_meta import _conform_output

BACKEND = "examples.pipes:factory"


@pytest.mark.timeout(600)
def test_the_example_backend_passes_every_clause_it_does_not_declare(tmp_path: Path) -> None:
    declared = load_backend(BACKEND)
    # The CPU tier: GPU tests are left out, not shown "not run" (a later -m wins over the helper's).
    extra = ("--sample", "-m", "not harness_gpu")
    code, report, output = _conform_output(BACKEND, 2, "", tmp_path, extra=extra)
    cells = report["clauses"]  # type: ignore[index]
    wrong = {}
    for clause in CLAUSES:
        if declared.declared(clause) is not None:
            continue
        verdicts = {
            t["test"]: t["outcome"]
            for cell in cells.get(clause, {}).values()
            for t in cell["tests"]
            if t["note"] != "filtered out"
        }
        if not verdicts or set(verdicts.values()) != {"pass"}:
            wrong[clause] = verdicts or "no test ran"
    assert not wrong, f"the example backend does not pass: {wrong}\n{output[-4000:]}"
    assert code == 0 and not report["failed"], f"conform exited {code}: {report['failed']}\n{output[-4000:]}"
