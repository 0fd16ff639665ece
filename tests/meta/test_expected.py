"""Known failures as strict xfails: a listed failure keeps the run green and the
clause FAIL; a listed test that passes fails the run; a new failure fails it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.meta.test_meta import _conform_output

pytestmark = [pytest.mark.harness_isolated, pytest.mark.timeout(600)]

LIST = """\
# Known failures of tests.meta.broken:drops_kwargs
# version: broken 1.0
test_c3_args_and_kwargs_reach_a_*[tests.meta.broken:drops_kwargs-*]  C3: kwargs never reach the worker
"""


def _conform(
    backend: str, tmp_path: Path, listing: str, k: str = "c3_", timeout: str = "120"
) -> tuple[int, dict[str, object], str]:
    """A conform run at world size 2 with ``listing`` as its known failures."""
    known = tmp_path / "known.txt"
    known.write_text(listing)
    extra = ("--expected-failures", str(known))
    return _conform_output(backend, 2, k, tmp_path, extra=extra, timeout=timeout, needs_report=False)


def _tests(report: dict[str, object], clause: str) -> list[dict[str, str]]:
    cells = report["clauses"][clause]  # type: ignore[index]
    return [t for cell in cells.values() for t in cell["tests"]]


def test_a_listed_failure_keeps_the_run_green_and_the_clause_failing(tmp_path: Path) -> None:
    code, report, output = _conform("tests.meta.broken:drops_kwargs", tmp_path, LIST)
    assert code == 0, f"the run failed with its failures listed:\n{output[-3000:]}"
    tests = _tests(report, "C3")
    assert tests and all(t["outcome"] == "FAIL" for t in tests), tests
    assert all(t["note"].startswith("known failure, known.txt:3 (recorded with broken 1.0): kwargs") for t in tests)
    # The evidence goes with it: what the test saw, not only what the list says.
    assert all("; seen: " in t["note"] and len(t["note"].split("; seen: ")[1]) > 10 for t in tests), tests
    assert "known failures of tests.meta.broken:drops_kwargs" in output


def test_a_listed_test_that_passes_fails_the_run_and_reads_as_an_unexpected_pass(tmp_path: Path) -> None:
    listing = LIST.replace("[tests.meta.broken:drops_kwargs-*]", "[*]")  # now matches mp's tests too, which pass
    code, report, output = _conform("mp", tmp_path, listing)
    assert code != 0, f"an unexpected pass left the run green:\n{output[-3000:]}"
    tests = _tests(report, "C3")
    assert tests and all(t["outcome"] == "pass" and "UNEXPECTED PASS" in t["note"] for t in tests), tests
    assert "XPASS(strict)" in output


def test_a_failure_not_listed_still_fails_the_run(tmp_path: Path) -> None:
    listing = LIST.replace("reach_a_*[", "reach_a_callable_unchanged[")  # the string-method test is not listed
    code, report, output = _conform("tests.meta.broken:drops_kwargs", tmp_path, listing)
    assert code != 0, f"an unlisted failure left the run green:\n{output[-3000:]}"
    outcomes = {t["test"].split("[")[0]: t["outcome"] for t in _tests(report, "C3")}
    assert set(outcomes.values()) == {"FAIL"}, outcomes


@pytest.mark.parametrize(
    ("listing", "message"),
    [
        (
            "test_c3_*  kwargs are lost\n",
            "known.txt:1: 'test_c3_*  kwargs are lost' is not '<test id pattern>  <clause>: <reason>'",
        ),
        ("test_c3_*  C99: no such clause\n", "known.txt:1: unknown clause 'C99'"),
        ("# header\ntest_c3_*  C4: the wrong clause\n", "known.txt:2: 'test_c3_*' matches test_c3_args"),
    ],
    ids=["no-clause", "unknown-clause", "wrong-clause"],
)
def test_a_bad_list_is_a_usage_error_naming_the_line(tmp_path: Path, listing: str, message: str) -> None:
    code, _, output = _conform("mp", tmp_path, listing)
    assert code == 4, f"exit {code}, expected pytest's usage error (4):\n{output[-3000:]}"
    assert message in output, output[-3000:]


def test_a_leak_found_after_a_listed_test_is_c9s_failure_and_fails_the_run(tmp_path: Path) -> None:
    # pytest reads the leak check's failure after the test as the listed test's expected failure.
    listing = LIST.replace("drops_kwargs-*]", "drops_kwargs_and_leaks_a_thread-*]")
    code, report, output = _conform("tests.meta.broken:drops_kwargs_and_leaks_a_thread", tmp_path, listing)
    assert code != 0, f"a leak after a listed test left the run green:\n{output[-3000:]}"
    c9 = [t for t in _tests(report, "C9") if t["outcome"] == "FAIL"]
    assert c9 and "found after the test" in c9[0]["note"] and "leaked" in c9[0]["note"], _tests(report, "C9")
    assert all(t["outcome"] == "FAIL" and t["note"].startswith("known failure") for t in _tests(report, "C3"))
    assert "not on the known-failures list" in output


LEAKS = """\
test_c3_args_and_kwargs_reach_a_*[tests.meta.broken:drops_kwargs*-*]  C3: kwargs never reach the worker
test_c3_*[tests.meta.broken:drops_kwargs*-*]  C9 (after the test): every executor leaves a thread behind
"""


def test_a_listed_leak_after_tests_of_other_clauses_fails_c9_and_keeps_the_run_green(tmp_path: Path) -> None:
    code, report, output = _conform("tests.meta.broken:drops_kwargs_and_leaks_a_thread", tmp_path, LEAKS)
    assert code == 0, f"the run failed with its leak listed:\n{output[-3000:]}"
    c9 = [t for t in _tests(report, "C9") if t["outcome"] == "FAIL"]
    assert c9 and all("known failure, known.txt:2" in t["note"] and "leaked" in t["note"] for t in c9), c9
    assert "listed leak not met" not in output


def test_a_listed_leak_no_test_met_is_named_without_failing_the_run(tmp_path: Path) -> None:
    code, _, output = _conform("tests.meta.broken:drops_kwargs", tmp_path, LEAKS)
    assert code == 0, output[-3000:]
    assert "listed leak not met by any test of this run (fixed? or timing): known.txt:2" in output


def test_a_listed_test_killed_at_the_timeout_is_its_known_failure(tmp_path: Path) -> None:
    # The check's call runs 3 s, longer than the 1 s allowed here: the kill is the listed failure (a hang).
    listing = "test_c4_a_wait_with_timeout_on_a_pending_future_*[*]  C4: hangs\n"
    code, report, output = _conform("mp", tmp_path, listing, k="c4_a_wait", timeout="1")
    assert code == 0, f"a listed test killed at the timeout failed the run:\n{output[-3000:]}"
    tests = [t for t in _tests(report, "C4") if t["note"] != "filtered out"]
    assert tests and all(t["outcome"] == "FAIL" and t["note"].startswith("known failure") for t in tests), tests
    assert "2 xfailed" in output
