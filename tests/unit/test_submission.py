"""verify: a conformance submission checked mechanically, as Kubernetes'
reviewers check theirs: digests, the spec version, every clause in every required
variant, no FAIL or not run, declared only where SPEC.md calls it optional."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.__main__ import main
from harness.contract import CLAUSES, SPEC_VERSION
from harness.report import ClauseMatrix
from harness.report import submission as sub

METHODS = ["fork", "spawn", "forkserver"]


def report(backend: str = "mp", change: dict[tuple[str, int], tuple[str, str]] | None = None) -> ClauseMatrix:
    """Every clause passes at world sizes 1, 2 and 4, each start method run;
    ``change``: (clause, world size) -> (outcome, note)."""
    m = ClauseMatrix(settings={"spec": SPEC_VERSION})
    for ws in (1, 2, 4):
        for clause in CLAUSES:
            outcome, note = (change or {}).get((clause, ws), ("pass", ""))
            for method in METHODS if ws == 2 else METHODS[:1]:
                m.add(
                    clause, f"{backend} ws{ws} cpu", outcome, f"test_{clause.lower()}[{backend}-ws{ws}-{method}]", note
                )
    m.state = "finished"
    return m


def submission(folder: Path, matrix: ClauseMatrix, **manifest: object) -> Path:
    folder.mkdir()
    matrix.write(str(folder / sub.REPORT_JSON), None)
    (folder / sub.LOG).write_text("the whole run's log\n")
    (folder / sub.TEST_LOGS).mkdir()
    (folder / sub.TEST_LOGS / "test_c1.log").write_text("== call: passed\n")
    sub.write_manifest(folder, {"backend": "mp", "spec": SPEC_VERSION, "start_methods": METHODS, **manifest})
    sub.write_sums(folder)
    return folder


def test_a_submission_that_passes_every_clause_everywhere_is_conformant(tmp_path: Path) -> None:
    verdict = sub.verify(submission(tmp_path / "s", report()))
    assert (verdict.verdict, verdict.reasons, verdict.exit_code) == ("conformant", [], 0)


def test_declaring_an_optional_capability_keeps_it_conformant_any_other_clause_makes_it_partial(tmp_path: Path) -> None:
    optional = {("C24", ws): ("declared", "one caller at a time") for ws in (1, 2, 4)}
    assert sub.verify(submission(tmp_path / "a", report(change=optional))).verdict == "conformant"
    c23 = {("C23", ws): ("declared", "Ray's ports listen on every interface") for ws in (1, 2, 4)}
    verdict = sub.verify(submission(tmp_path / "b", report(change=c23)))
    assert (verdict.verdict, verdict.reasons, verdict.exit_code) == ("partial", ["C23 declared"], 1)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({("C7", 4): ("FAIL", "a late reply")}, "C7 [mp ws4 cpu] FAIL"),
        ({("C16", 2): ("not run", "filtered out")}, "C16 [mp ws2 cpu] not run"),
        ({("C5", 1): ("blocked by C4", "no future")}, "C5 [mp ws1 cpu] blocked by C4"),
    ],
)
def test_a_fail_a_not_run_or_a_blocked_cell_is_not_conformant_and_named(
    tmp_path: Path, change: dict[tuple[str, int], tuple[str, str]], reason: str
) -> None:
    verdict = sub.verify(submission(tmp_path / "s", report(change=change)))
    assert verdict.verdict == "not conformant" and reason in verdict.reasons


def test_a_required_world_size_or_a_declared_start_method_that_did_not_run_is_not_conformant(tmp_path: Path) -> None:
    m = report()
    m.cells = {k: v for k, v in m.cells.items() if k[1] != "mp ws4 cpu"}
    verdict = sub.verify(submission(tmp_path / "a", m))
    assert "no result at world size 4 on the CPU tier (mp ws4 cpu)" in verdict.reasons
    assert sub.verify(submission(tmp_path / "b", m, world_sizes=[1, 2])).verdict == "conformant"
    verdict = sub.verify(submission(tmp_path / "c", report(), start_methods=[*METHODS, "thread"]))
    assert "start method 'thread', which the backend declares, did not run" in verdict.reasons


def test_one_byte_changed_a_file_added_or_one_missing_is_rejected_by_its_digest(tmp_path: Path) -> None:
    folder = submission(tmp_path / "s", report(change={("C7", 4): ("FAIL", "a late reply")}))
    data = (folder / sub.REPORT_JSON).read_bytes()
    at = data.index(b'"FAIL"')
    (folder / sub.REPORT_JSON).write_bytes(data[:at] + b'"pass"' + data[at + 6 :])  # FAIL made pass
    verdict = sub.verify(folder)
    assert verdict.verdict == "not conformant"
    assert verdict.reasons == ["report.json does not match its digest in SHA256SUMS: changed after the run"]
    (folder / sub.REPORT_JSON).write_bytes(data)
    (folder / "extra.txt").write_text("x")
    assert sub.verify(folder).reasons == ["extra.txt is not listed in SHA256SUMS"]
    (folder / "extra.txt").unlink()
    (folder / sub.LOG).unlink()
    assert sub.verify(folder).reasons == ["e2e.log is listed in SHA256SUMS but missing"]


def test_a_run_against_an_older_spec_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = submission(tmp_path / "s", report(), spec="2026-11-30")
    assert main(["verify", str(folder)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"partial: run against SPEC.md 2026-11-30, older than the current {SPEC_VERSION}")


def test_a_folder_that_is_no_submission_is_not_conformant_and_says_why(tmp_path: Path) -> None:
    assert sub.verify(tmp_path / "missing").reasons == [f"{tmp_path / 'missing'} is not a folder"]
    (tmp_path / "empty").mkdir()
    assert sub.verify(tmp_path / "empty").reasons == ["SHA256SUMS is missing: nothing vouches for the files"]


def test_a_sampled_run_whose_cells_passed_partly_is_partial_and_names_each_partly_run_cell(tmp_path: Path) -> None:
    m = report()
    m.add("C1", "mp ws2 cpu", "not run", "test_c1_other[mp-ws2-spawn]", "filtered out")
    verdict = sub.verify(submission(tmp_path / "s", m))
    assert (verdict.verdict, verdict.exit_code) == ("partial", 1)
    assert verdict.reasons == ["C1 [mp ws2 cpu] partly run: 3 of 4 tests, the rest filtered out"]
