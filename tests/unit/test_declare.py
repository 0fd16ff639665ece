"""harness.declare: the typed way to give a factory its declarations, one
keyword for each attribute the loader reads, and nothing else."""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

import harness
from harness.contract import DECLARATIONS

ROOT = Path(__file__).resolve().parents[2]


def test_declare_has_a_keyword_for_each_declaration_the_loader_reads() -> None:
    source = (ROOT / "harness" / "backends.py").read_text(encoding="utf-8")
    read = set(re.findall(r'getattr\(factory, "(\w+)"', source))
    keywords = [p for p in inspect.signature(harness.declare).parameters if p != "factory"]
    assert sorted(keywords) == sorted(read) == sorted(DECLARATIONS)


@contextlib.contextmanager
def _session() -> Iterator[dict[str, str]]:
    yield {}


def test_a_factory_declared_with_declare_loads_with_those_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    def create(config: harness.ExecutorConfig) -> harness.Executor:
        raise AssertionError("not called")

    assert (
        harness.declare(
            create,
            unsupported={"C12": "closed explicitly"},
            world_sizes=[1, 2],
            start_methods=["fork"],
            nodes=[1, 2],
            session=_session,
            preload=["json"],
            expected_failures="known.txt",
            version=lambda: "mine 1.0",
        )
        is create
    )
    module = types.ModuleType("declared_backend")
    module.create = create  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "declared_backend", module)
    loaded = harness.load_backend("declared_backend:create")
    assert loaded.declared("C12") == "closed explicitly"
    assert (loaded.world_sizes, loaded.start_methods, loaded.nodes) == ((1, 2), ("fork",), (1, 2))
    assert (loaded.session, loaded.preload, loaded.expected_failures, loaded.version) == (
        _session,
        ("json",),
        "known.txt",
        "mine 1.0",
    )


def test_a_declaration_left_out_keeps_its_default() -> None:
    def create(config: harness.ExecutorConfig) -> harness.Executor:
        raise AssertionError("not called")

    harness.declare(create, start_methods=("spawn",))
    assert create.start_methods == ("spawn",)  # type: ignore[attr-defined]
    assert not any(hasattr(create, name) for name in DECLARATIONS if name != "start_methods")


def test_declare_values_are_checked_by_the_loader_as_attributes_are(monkeypatch: pytest.MonkeyPatch) -> None:
    def create(config: harness.ExecutorConfig) -> harness.Executor:
        raise AssertionError("not called")

    harness.declare(create, start_methods=("thread",))
    module = types.ModuleType("badly_declared")
    module.create = create  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "badly_declared", module)
    with pytest.raises(ValueError, match="'start_methods' must name some of"):
        harness.load_backend("badly_declared:create")
