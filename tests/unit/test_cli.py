"""`python -m harness conform` passes its settings to a fresh pytest."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from harness.__main__ import main


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    seen: list[list[str]] = []

    def fake_call(argv: list[str], **kwargs: Any) -> int:
        seen.append(argv)
        return 0

    monkeypatch.setattr(subprocess, "call", fake_call)
    monkeypatch.delenv("HARNESS_WORLD_SIZE", raising=False)
    return seen


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_conform_runs_its_documented_world_sizes_whatever_the_ini_says(calls: list[list[str]]) -> None:
    assert main(["conform", "--backend", "ray"]) == 0
    assert _flag(calls[0], "--world-size") == "1,2,4"
    assert _flag(calls[0], "--backend") == "ray"


def test_conform_world_sizes_from_the_command_line_or_the_environment(
    calls: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    main(["conform", "--backend", "mp", "--world-size", "2"])
    monkeypatch.setenv("HARNESS_WORLD_SIZE", "4")
    main(["conform", "--backend", "mp"])
    assert [_flag(argv, "--world-size") for argv in calls] == ["2", "4"]
