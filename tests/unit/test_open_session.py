"""One way to open a backend for a run (harness.backends.open_session): its
preloads imported, its session entered and left, the session's environment
given back and, unless asked not to, set while it lasts. The plugin, a chaos
run, an A/B run and bench all open backends through it."""

from __future__ import annotations

import ast
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import backends
from harness.backends import LoadedBackend, open_session

HARNESS = Path(__file__).resolve().parents[2] / "harness"


@pytest.fixture(autouse=True)
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch is every run's preload: these tests check the mechanism on small modules (torch: seconds)."""
    monkeypatch.setattr(backends, "PRELOAD", ())


def _backend(events: list[str], preload: tuple[str, ...] = (), env: dict[str, str] | None = None) -> LoadedBackend:
    @contextlib.contextmanager
    def session() -> Iterator[dict[str, str]]:
        events.append("enter")
        try:
            yield dict(env or {})
        finally:
            events.append("exit")

    return LoadedBackend("fake", lambda config: None, session=session, preload=preload)  # type: ignore[arg-type,return-value]


def test_the_session_is_entered_its_environment_set_while_it_lasts_and_left(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_TEST_SESSION", "before")
    events: list[str] = []
    with open_session(_backend(events, env={"HARNESS_TEST_SESSION": "inside"})) as env:
        assert env == {"HARNESS_TEST_SESSION": "inside"}
        assert os.environ["HARNESS_TEST_SESSION"] == "inside"
        assert events == ["enter"]
    assert events == ["enter", "exit"]
    assert os.environ["HARNESS_TEST_SESSION"] == "before"


def test_without_set_environ_the_environment_is_only_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_TEST_SESSION", raising=False)
    events: list[str] = []
    with open_session(_backend(events, env={"HARNESS_TEST_SESSION": "x"}), set_environ=False) as env:
        assert env == {"HARNESS_TEST_SESSION": "x"}
        assert "HARNESS_TEST_SESSION" not in os.environ
    assert events == ["enter", "exit"]


def test_the_session_is_left_when_the_block_raises() -> None:
    events: list[str] = []
    with pytest.raises(RuntimeError), open_session(_backend(events)):
        raise RuntimeError("the run failed")
    assert events == ["enter", "exit"]


def test_a_backend_without_a_session_gives_an_empty_environment() -> None:
    loaded = LoadedBackend("plain", lambda config: None)  # type: ignore[arg-type,return-value]
    with open_session(loaded) as env:
        assert env == {}


def test_its_preloads_are_imported_and_one_that_fails_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "harness_test_preloaded.py").write_text("LOADED = True\n")
    (tmp_path / "harness_test_broken.py").write_text("raise ImportError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("harness_test_preloaded", "harness_test_broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with open_session(_backend([], preload=("harness_test_broken", "harness_test_preloaded", "no_such_module"))):
        assert sys.modules["harness_test_preloaded"].LOADED


def test_no_module_but_the_loader_enters_a_backends_session_itself() -> None:
    entered = [
        f"{path.relative_to(HARNESS.parent)}:{node.lineno}"
        for path in sorted(HARNESS.rglob("*.py"))
        if path.name != "backends.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "session"
    ]
    assert entered == [], "open a backend with harness.backends.open_session"
