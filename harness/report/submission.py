"""A conformance submission, and its mechanical check (``python -m harness verify DIR``).

Someone who must trust a claim of conformance they did not run reads a
submission, as Kubernetes' conformance reviewers do: the run's whole log, its
JUnit, the JSON report and the HTML page, each test's own log, and
``submission.json`` (what ran, with what, by which command), all under a
``SHA256SUMS``. ``verify`` checks it without running anything::

    DIR ──► SHA256SUMS: every file's digest, no file unlisted, none missing ──┐
        ──► submission.json: the spec version (the current one?)            ├─► conformant | partial | not conformant
        ──► report.json: every clause in every required variant, no FAIL,   │     with the reasons; exit 0 only
            no "not run", no "blocked"; declared only where SPEC.md calls ──┘     for conformant
            the capability optional (C12, C22, C24), else "partial: Cn declared";
            every test of every cell run, else "partial: Cn [column] partly run"

The required variants: world sizes 1, 2 and 4 on the CPU tier (those of them
the backend supports, where it declares its world sizes), and each start method
the backend declares at least once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from harness.backends import CAPABILITIES
from harness.contract import CLAUSES, SPEC_VERSION
from harness.report import DECLARED, FAIL, NOT_RUN, ClauseMatrix, column_name
from harness.verdicts import blocker_of

MANIFEST = "submission.json"
SUMS = "SHA256SUMS"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
JUNIT = "junit.xml"
LOG = "e2e.log"
TEST_LOGS = "tests"
#: The world sizes a submission must hold on the CPU tier.
REQUIRED_WORLD_SIZES = (1, 2, 4)
#: Clauses SPEC.md calls optional capabilities: declaring them keeps a backend conformant.
OPTIONAL_CLAUSES = frozenset(CAPABILITIES.values())

CONFORMANT = "conformant"
PARTIAL = "partial"
NOT_CONFORMANT = "not conformant"


@dataclasses.dataclass
class Verdict:
    verdict: str
    reasons: list[str]
    #: What was checked and held, for the reader.
    checked: list[str] = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == CONFORMANT else 1

    def render(self) -> str:
        if len(self.reasons) <= 1:
            lines = [self.verdict + "".join(f": {r}" for r in self.reasons)]
        else:
            lines = [f"{self.verdict}:", *(f"  - {r}" for r in self.reasons)]
        lines += [f"  checked: {c}" for c in self.checked]
        return "\n".join(lines)


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def files_of(folder: Path) -> list[str]:
    """Every file under ``folder`` but SHA256SUMS, as sorted POSIX paths relative to it."""
    out = []
    for root, _, names in os.walk(folder):
        for name in names:
            rel = (Path(root) / name).relative_to(folder).as_posix()
            if rel != SUMS:
                out.append(rel)
    return sorted(out)


def write_sums(folder: Path) -> None:
    """``SHA256SUMS`` over every file of the submission, in sha256sum's format."""
    lines = [f"{digest(folder / rel)}  {rel}" for rel in files_of(folder)]
    (folder / SUMS).write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _check_sums(folder: Path) -> list[str]:
    sums = folder / SUMS
    if not sums.is_file():
        return [f"{SUMS} is missing: nothing vouches for the files"]
    problems = []
    listed: dict[str, str] = {}
    for number, line in enumerate(sums.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        if match is None:
            problems.append(f"{SUMS} line {number} is not 'digest  path': {line[:80]!r}")
            continue
        listed[match[2]] = match[1]
    present = set(files_of(folder))
    for rel, expected in listed.items():
        if rel not in present:
            problems.append(f"{rel} is listed in {SUMS} but missing")
        elif digest(folder / rel) != expected:
            problems.append(f"{rel} does not match its digest in {SUMS}: changed after the run")
    problems += [f"{rel} is not listed in {SUMS}" for rel in sorted(present - set(listed))]
    return problems


def verify(folder: str | Path) -> Verdict:
    """The verdict on the submission in ``folder``; see the module's docstring."""
    where = Path(folder)
    if not where.is_dir():
        return Verdict(NOT_CONFORMANT, [f"{where} is not a folder"])
    tampered = _check_sums(where)
    if tampered:
        return Verdict(NOT_CONFORMANT, tampered)
    checked = [f"{SUMS}: every file's digest matches, no file unlisted"]
    try:
        manifest, matrix = _read(where)
    except ValueError as exc:
        return Verdict(NOT_CONFORMANT, [str(exc)], checked)
    failing, partial = judge(matrix, manifest)
    spec = str(manifest.get("spec", "?"))
    if spec != SPEC_VERSION:
        partial.insert(0, f"run against SPEC.md {spec}, older than the current {SPEC_VERSION}")
    else:
        checked.append(f"spec {spec}, the current one")
    if failing:
        return Verdict(NOT_CONFORMANT, failing + partial, checked)
    if partial:
        return Verdict(PARTIAL, partial, checked)
    checked.append(
        "every clause in every required variant: no FAIL, no not run, every test run, declared only where optional"
    )
    return Verdict(CONFORMANT, [], checked)


def _read(folder: Path) -> tuple[dict[str, Any], ClauseMatrix]:
    """The manifest and the report; ValueError naming the file that cannot be read."""
    from harness.report.reading import read_report

    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{MANIFEST} cannot be read: {exc}") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{MANIFEST} is not a JSON object")
    return manifest, read_report(folder / REPORT_JSON)


def judge(matrix: ClauseMatrix, manifest: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(why it is not conformant, why it is only partial) of one backend's report."""
    failing: list[str] = []
    partial: list[str] = []
    backend = str(manifest.get("backend", ""))
    if matrix.state != "finished":
        failing.append(f"the run did not finish ({matrix.state})")
    declared_sizes = manifest.get("world_sizes")
    sizes = [ws for ws in REQUIRED_WORLD_SIZES if not declared_sizes or ws in declared_sizes]
    for ws in sizes:
        column = column_name(backend, ws, "cpu")
        missing = [c for c in CLAUSES if matrix.outcome(c, column) is None]
        if len(missing) == len(CLAUSES):
            failing.append(f"no result at world size {ws} on the CPU tier ({column})")
            continue
        if missing:
            failing.append(f"{column}: no outcome for {', '.join(missing)}")
        for clause in CLAUSES:
            outcome = matrix.outcome(clause, column)
            if outcome == FAIL:
                failing.append(f"{clause} [{column}] FAIL")
            elif outcome == NOT_RUN:
                failing.append(f"{clause} [{column}] not run")
            elif outcome is not None and blocker_of(outcome):
                failing.append(f"{clause} [{column}] {outcome}")
            elif outcome == DECLARED and clause not in OPTIONAL_CLAUSES:
                text = f"{clause} declared"
                if text not in partial:
                    partial.append(text)
            if outcome is not None and outcome != FAIL and matrix.partly_run(clause, column):
                done, of = matrix.coverage(clause, column)
                partial.append(f"{clause} [{column}] partly run: {done} of {of} tests, the rest filtered out")
    required = {column_name(backend, ws, "cpu") for ws in sizes}
    for clause, column in matrix.failed():
        if column not in required and column.startswith(f"{backend} ws"):
            failing.append(f"{clause} [{column}] FAIL")
    for method in manifest.get("start_methods") or ():
        ran = re.compile(rf"-ws\d+-{re.escape(str(method))}[\]-]")
        if not any(ran.search(r.test) for results in matrix.cells.values() for r in results):
            failing.append(f"start method {method!r}, which the backend declares, did not run")
    others = sorted({col for _, col in matrix.cells if not col.startswith(f"{backend} ws")})
    if others:
        failing.append(f"the report holds other backends' columns too ({', '.join(others)}): one backend a submission")
    return failing, partial
