"""Side by side, a variant's first test runs alone: it is the variant's C1 test,
the quickest sign that its factory works, not whichever test was collected first."""

from __future__ import annotations

from typing import Any

from harness.pytest_plugin.markers import CLAUSE
from harness.pytest_plugin.parallel import _first_tests_first


class _Marker:
    def __init__(self, clause: str) -> None:
        self.args = (clause,)


class _Item:
    def __init__(self, name: str, variant: str | None, clause: str | None) -> None:
        self.name, self.variant, self.clause = name, variant, clause

    def get_closest_marker(self, name: str) -> Any:
        return _Marker(self.clause) if name == CLAUSE and self.clause else None

    def __repr__(self) -> str:
        return self.name


def _order(items: list[_Item]) -> list[str]:
    return [i.name for i in _first_tests_first(items, lambda i: i.variant)]  # type: ignore[arg-type, attr-defined]


def test_each_variants_c1_test_moves_to_where_its_first_test_was() -> None:
    items = [
        _Item("plain", None, None),
        _Item("c24-a", "a", "C24"),
        _Item("c24-b", "b", "C24"),
        _Item("c7-a", "a", "C7"),
        _Item("c1-a", "a", "C1"),
        _Item("c1-b", "b", "C1"),
    ]
    got = _order(items)
    assert got.index("c1-a") < got.index("c24-a") < got.index("c7-a")
    assert got.index("c1-b") < got.index("c24-b")
    assert sorted(got) == sorted(i.name for i in items)
    assert got[0] == "plain"


def test_a_variant_without_a_c1_test_keeps_its_order() -> None:
    items = [_Item("c24-a", "a", "C24"), _Item("c7-a", "a", "C7")]
    assert _order(items) == ["c24-a", "c7-a"]
