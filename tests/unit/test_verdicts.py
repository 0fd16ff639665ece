"""A verdict's words are defined once (harness/verdicts.py): the outcomes, the
skip reasons a test ends with to say one, and the test properties' keys; the
suite, the plugin and the report read them from there."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from harness.verdicts import (
    BLOCKED,
    OUTCOMES,
    Outcome,
    Prop,
    blocked_by,
    blocked_reason,
    blocker_of,
    is_outcome,
    not_applicable_reason,
    read_skip_reason,
)

HARNESS = Path(__file__).resolve().parents[2] / "harness"


def test_an_outcome_is_its_text_wherever_it_is_written() -> None:
    assert Outcome.PASS == "pass" and Outcome("FAIL") is Outcome.FAIL
    assert f"{Outcome.NOT_APPLICABLE}|{Outcome.DECLARED:>9}" == "not applicable| declared"
    assert str(Outcome.NOT_RUN) == "not run"
    assert json.dumps({"c": Outcome.FAIL}) == '{"c": "FAIL"}'
    assert {Outcome.PASS: 1}["pass"] == 1


def test_a_blocked_outcome_names_its_clause_and_reads_back() -> None:
    assert blocked_by("C4") == "blocked by C4" == BLOCKED + "C4"
    assert blocker_of("blocked by C4") == "C4"
    assert blocker_of("FAIL") is None and blocker_of("blocked by ") is None


@pytest.mark.parametrize(
    "text, ok",
    [
        ("pass", True),
        ("FAIL", True),
        ("not run", True),
        ("blocked by C12", True),
        ("fail", False),
        ("blocked by ", False),
    ],
)
def test_is_outcome_takes_the_members_and_blocked_by_a_clause(text: str, ok: bool) -> None:
    assert is_outcome(text) is ok


def test_spec_outcomes_are_the_members_and_blocked_by_cn() -> None:
    assert set(OUTCOMES) == {*Outcome, "blocked by Cn"}


def test_a_skip_reason_says_not_applicable_or_blocked_and_a_plain_one_says_nothing() -> None:
    assert read_skip_reason(not_applicable_reason("one rank")) == (Outcome.NOT_APPLICABLE, "one rank")
    assert read_skip_reason(blocked_reason("C4", "no future")) == ("blocked by C4", "no future")
    assert read_skip_reason("needs 2 GPUs, found 0") is None


def _string_constants(path: Path) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_no_module_but_verdicts_spells_a_property_key_or_a_skip_reasons_prefix() -> None:
    # harness_backend is also an option's dest and harness_variant the fixture's
    # name: their strings mean those there.
    keys = {v for k, v in vars(Prop).items() if k.isupper()} - {Prop.BACKEND, Prop.VARIANT}
    spelt = [
        f"{path.relative_to(HARNESS.parent)}:{line}: {text!r}"
        for path in sorted(HARNESS.rglob("*.py"))
        if path.name != "verdicts.py"
        for line, text in _string_constants(path)
        if text in keys or text.startswith(("[not applicable]", "[blocked by ", BLOCKED))
    ]
    assert spelt == []
