"""One table of a run's options (harness/run_options.py): the plugin's options,
short forms, ini keys and environment variables, and ``python -m harness
conform``'s options, are all made from it, with the same help."""

from __future__ import annotations

import re
from typing import Any

import pytest

import harness.__main__ as cli
from harness.pytest_plugin import options
from harness.run_options import RUN_OPTIONS, run_option


class _Recorder:
    """A stand-in for pytest's parser: what the plugin registers."""

    def __init__(self) -> None:
        self.options: dict[str, dict[str, Any]] = {}
        self.ini: dict[str, str] = {}
        self._anonymous = self
        self._groups: list[Any] = []

    def getgroup(self, *_: Any) -> _Recorder:
        return self

    def addoption(self, name: str, **kwargs: Any) -> None:
        self.options[name] = kwargs

    def addini(self, name: str, help_text: str, default: str = "") -> None:
        self.ini[name] = help_text


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_plugin_registers_every_row_with_its_help_its_ini_key_and_its_short_form() -> None:
    parser = _Recorder()
    options.add_options(parser)  # type: ignore[arg-type]
    for row in RUN_OPTIONS:
        registered = parser.options[row.option]
        assert registered["dest"] == row.dest
        assert registered["help"] == row.help
        assert (registered.get("action") == "store_true") == row.flag
        if row.ini:
            assert parser.ini[row.ini] == row.help
    parser.options_before = dict(parser.options)  # type: ignore[attr-defined]
    parser.options = {}
    added = options.add_short_forms(parser)  # type: ignore[arg-type]
    assert added == [row.short_form for row in RUN_OPTIONS if row.short]
    for row in RUN_OPTIONS:
        if row.short:
            assert parser.options[row.short_form]["dest"] == row.dest


def test_the_environment_conform_help_lists_is_every_rows_variable() -> None:
    listed = options.environment()
    for row in RUN_OPTIONS:
        if row.env:
            assert listed[row.env].startswith(f"as {row.option}")


def test_conform_takes_every_row_it_passes_on_with_the_plugins_help(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option: argparse breaks words at hyphens
    with pytest.raises(SystemExit):
        cli.main(["conform", "--help"])
    out = _flat(capsys.readouterr().out.split("options:", 1)[1])
    for row in RUN_OPTIONS:
        if row.conform:
            shown = re.search(re.escape(row.short_form) + r"(?: [A-Z_]+)? (.*?) (?=--|-k )", out)
            assert shown is not None, f"{row.short_form} not in conform --help"
            assert shown.group(1).startswith(_flat(row.help)), (row.name, shown.group(1))


def test_conform_passes_every_option_it_takes_on_to_pytest_as_the_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(cli, "_in_a_temporary_folder_of_its_own", lambda argv, keep, log=None: seen.append(argv) or 0)
    argv = ["conform"]
    for row in RUN_OPTIONS:
        if row.conform:
            argv += [row.short_form] if row.flag else [row.short_form, f"value-of-{row.name}"]
    assert cli.main(argv) == 0
    given = seen[0]
    for row in RUN_OPTIONS:
        if not row.conform:
            continue
        if row.flag:
            assert row.option in given, row.option
        else:
            at = given.index(row.option)
            assert given[at + 1] == f"value-of-{row.name}", row.option


def test_a_setting_reads_its_rows_environment_variable_and_ini_key() -> None:
    row = run_option("harness_world_size")
    assert (row.option, row.short_form, row.env, row.ini) == (
        "--harness-world-size",
        "--world-size",
        "HARNESS_WORLD_SIZE",
        "harness_world_sizes",
    )
    assert not run_option("harness_timeout").short, "pytest-timeout has --timeout"
