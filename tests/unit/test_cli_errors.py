"""Errors of the command line name the cause and where it came from, and every
subcommand exits by one convention (pytest's): 0 success, 1 a negative verdict,
2 interrupted, 3 internal error, 4 usage error, 5 nothing was run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import harness.__main__ as cli
from harness.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
#: A usage error comes before anything starts: well within this, even on a loaded machine.
QUICK_S = 120


def _harness(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        timeout=QUICK_S,
        check=False,
        cwd=ROOT,
        env={**clean, **(env or {})},
    )


# --------------------------------------------------------------------------- the convention


def test_the_exit_statuses_are_pytests() -> None:
    assert (
        cli.EXIT_OK,
        cli.EXIT_NEGATIVE,
        cli.EXIT_INTERRUPTED,
        cli.EXIT_INTERNAL_ERROR,
        cli.EXIT_USAGE,
        cli.EXIT_NOTHING_RUN,
    ) == (
        pytest.ExitCode.OK,
        pytest.ExitCode.TESTS_FAILED,
        pytest.ExitCode.INTERRUPTED,
        pytest.ExitCode.INTERNAL_ERROR,
        pytest.ExitCode.USAGE_ERROR,
        pytest.ExitCode.NO_TESTS_COLLECTED,
    )


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["conform"],
        ["bench"],
        ["chaos"],
        ["verify"],
        ["report"],
        ["report", "diff"],
        ["report", "html"],
        ["docs"],
        ["cluster"],
    ],
    ids=lambda c: " ".join(c) or "harness",
)
def test_every_help_ends_with_the_exit_statuses(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "exit status (pytest's, for every subcommand):" in out, out
    for line in ("0  success", "2  interrupted", "3  internal error", "4  usage error", "5  nothing was run"):
        assert line in out, f"{line!r} missing from {' '.join(command)} --help"


@pytest.mark.parametrize(
    "argv",
    [
        ["nosuch"],
        ["chaos"],  # --backend is required
        ["bench", "--iters", "0"],
        ["conform"],  # --backend is required
        ["report", "diff", "only-one.json"],
    ],
    ids=" ".join,
)
def test_argparse_errors_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 4
    assert ": error: " in capsys.readouterr().err


def test_a_usage_error_from_the_command_line_exits_4_in_one_line() -> None:
    done = _harness("chaos", "--backend", "uni", "--world-size", "1", "--duration", "0")
    assert done.returncode == 4, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "python -m harness chaos: error: argument --duration: expected a number of seconds > 0, got '0'"
    )


def test_an_unexpected_exception_is_an_internal_error_not_a_negative_verdict(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: Any) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "_docs", broken)
    assert main(["docs"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom" in err
    assert "internal error (exit status 3" in err


def test_an_interrupt_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_docs", interrupted)
    assert main(["docs"]) == 2
    assert "interrupted" in capsys.readouterr().err


# --------------------------------------------------------------------------- conform


def test_a_node_count_dividing_no_world_size_is_a_usage_error_up_front() -> None:
    # The finding: 13 s of "[NOTSET] SKIPPED" lines, then "no test of it was selected".
    done = _harness("conform", "--backend", "mp", "--nodes", "3", "--world-size", "4")
    out = done.stdout + done.stderr
    assert done.returncode == 4, out[-3000:]
    assert (
        "Invalid node count 3 from the command line: it divides none of the world sizes 4 (from the command line)"
        in out
    ), out[-3000:]
    assert "SKIPPED" not in out


def test_a_node_count_from_the_environment_is_named_so() -> None:
    done = _harness("conform", "--backend", "mp", "--world-size", "1,2", env={"HARNESS_NODES": "1,4"})
    assert done.returncode == 4, (done.stdout + done.stderr)[-3000:]
    assert (
        "Invalid node count 4 from the environment variable HARNESS_NODES: it divides none of the world sizes 1,2"
        in done.stdout + done.stderr
    )


class _Config:
    """What parse_options reads of a pytest config: options given, and ini settings."""

    def __init__(self, options: dict[str, Any] | None = None, ini: dict[str, str] | None = None) -> None:
        self.options, self.ini = options or {}, ini or {}

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    def getini(self, name: str) -> Any:
        if name == "timeout":
            raise ValueError(name)  # as where pytest-timeout is not installed
        return self.ini.get(name, "")


def _parse(monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], ini: dict[str, str] | None = None) -> Any:
    from harness.pytest_plugin.options import parse_options

    for name in [n for n in os.environ if n.startswith("HARNESS_") or n == "PYTEST_TIMEOUT"]:
        monkeypatch.delenv(name)
    return parse_options(_Config(options, ini))  # type: ignore[arg-type]


def test_the_node_check_reads_a_backends_own_world_sizes_and_names_their_ini(monkeypatch: pytest.MonkeyPatch) -> None:
    ini = {"harness_backends": "mp,ray", "harness_backend_world_sizes": "ray=1,3"}
    with pytest.raises(pytest.UsageError) as info:
        _parse(monkeypatch, {"harness_nodes": "2"}, ini)
    assert str(info.value).startswith(
        "Invalid node count 2 from the command line: it divides none of the world sizes of backend 'ray' 1,3 "
        "(from the ini setting harness_backend_world_sizes)"
    )
    # A count some world size admits is no error; a world size it cannot span just has no such column.
    opts = _parse(monkeypatch, {"harness_nodes": "1,2", "harness_world_size": "1,2", "harness_backend": "mp"})
    assert opts.nodes == [1, 2]


@pytest.mark.parametrize(
    ("option", "env", "ini", "value", "what"),
    [
        ("harness_world_size", "HARNESS_WORLD_SIZE", "harness_world_sizes", "abc", "world size"),
        ("harness_start_method", "HARNESS_START_METHOD", "harness_start_methods", "bogus", "start method"),
        ("harness_timeout", "HARNESS_TIMEOUT", "harness_timeout", "-1", "timeout"),
        ("harness_jobs", "HARNESS_JOBS", "harness_jobs", "x", "job count"),
        ("harness_nodes", "HARNESS_NODES", "harness_nodes", "0", "node count"),
        ("harness_sample", "HARNESS_SAMPLE", "harness_sample", "mp/bogus", "sample selector"),
        ("harness_seed", "HARNESS_SEED", None, "x", "seed"),
        ("harness_clause", "HARNESS_CLAUSE", None, "C99", "clause"),
        ("harness_require_gpus", "HARNESS_REQUIRE_GPUS", None, "x", "GPU count"),
    ],
)
def test_each_setting_names_the_source_its_bad_value_came_from(
    option: str, env: str, ini: str | None, value: str, what: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = {"harness_backend": "mp"}
    with pytest.raises(pytest.UsageError, match=f"^Invalid {what} .* from the command line"):
        _parse(monkeypatch, {**base, option: value})
    if ini is not None:
        with pytest.raises(pytest.UsageError, match=f"^Invalid {what} .* from the ini setting {ini}"):
            _parse(monkeypatch, base, {ini: value})
    assert _parse(monkeypatch, base) is not None  # clears the environment first
    monkeypatch.setenv(env, value)
    from harness.pytest_plugin.options import parse_options

    with pytest.raises(pytest.UsageError, match=f"^Invalid {what} .* from the environment variable {env}"):
        parse_options(_Config(base))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("env", "value", "named"),
    [
        ("HARNESS_WORLD_SIZE", "abc", "Invalid world size 'abc' from the environment variable HARNESS_WORLD_SIZE"),
        ("HARNESS_TIMEOUT", "soon", "Invalid timeout 'soon' from the environment variable HARNESS_TIMEOUT"),
        ("HARNESS_REQUIRE_NODES", "maybe", "Invalid value 'maybe' of the environment variable HARNESS_REQUIRE_NODES"),
        # Read where a test is watched, not with the options: it was a traceback at import.
        ("HARNESS_PROGRESS_S", "often", "Invalid HARNESS_PROGRESS_S 'often' from the environment variable"),
        ("HARNESS_PROGRESS_S", "0", "Invalid HARNESS_PROGRESS_S '0' from the environment variable"),
    ],
)
def test_conform_names_the_environment_as_the_source_of_a_bad_value(env: str, value: str, named: str) -> None:
    # The finding: conform passed HARNESS_WORLD_SIZE on as an option, and the error said "from the command line".
    done = _harness("conform", "--backend", "mp", env={env: value})
    out = done.stdout + done.stderr
    assert done.returncode == 4, out[-3000:]
    assert named in out and "from the command line" not in out, out[-3000:]


def test_conform_without_a_world_size_leaves_it_to_the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(cli, "run_pytest", lambda argv, log=None: seen.append(argv) or 0)
    monkeypatch.setenv("HARNESS_WORLD_SIZE", "2")
    assert main(["conform", "--backend", "mp"]) == 0
    assert "--harness-world-size" not in seen[0]
    assert main(["conform", "--backend", "mp", "--world-size", "1"]) == 0
    assert seen[1][seen[1].index("--harness-world-size") + 1] == "1"


def test_a_submission_that_cannot_be_made_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").write_text("x")
    assert main(["conform", "--backend", "mp", "--submission", str(tmp_path)]) == 4
    assert "is not an empty folder" in capsys.readouterr().err


def test_conform_help_lists_the_backends_the_environment_and_what_goes_to_pytest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.backends import BUILTIN_BACKENDS
    from harness.pytest_plugin.options import environment, option_names

    with pytest.raises(SystemExit):
        main(["conform", "--help"])
    out = capsys.readouterr().out
    for name, (factory, _) in BUILTIN_BACKENDS.items():
        assert re.search(rf"^  {re.escape(name)} +{re.escape(factory)}", out, re.M), f"backend {name} not listed"
    for env in environment():
        assert f"  {env}: " in out, f"{env} not listed"
    for flag in cli._PASSED_ON.values():
        assert f"-> {flag}" in out
    for option in option_names():
        assert option in out, f"{option} not named"
    assert "-c /dev/null --rootdir <suite>" in out


#: Set by the harness for processes it starts itself, not by its users.
_INTERNAL_ENV = {"HARNESS_FAIL_WORKER_INIT", "HARNESS_LEAK_TAG", "HARNESS_STACKS_DIR"}


def test_every_environment_variable_the_harness_reads_is_in_conform_help() -> None:
    from harness.pytest_plugin.options import environment

    named = set()
    for path in (ROOT / "harness").rglob("*.py"):
        named |= set(re.findall(r"[\"'](HARNESS_[A-Z_]+)[\"']", path.read_text(encoding="utf-8")))
    assert named - _INTERNAL_ENV - set(environment()) == set()


# --------------------------------------------------------------------------- bench


def test_a_gate_no_workload_measures_is_a_usage_error_not_b_is_slower() -> None:
    done = _harness(
        "bench", "--workload", "round-trip", "--compare", "mp", "mp", "--gate", "bogus", "--world-size", "1"
    )
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr
    assert "argument --gate: 'bogus' is not a metric of workload 'round-trip'" in done.stderr


def test_a_gate_beside_curves_is_named_as_judging_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "--curves", "payload", "--gate", "bogus"])
    assert info.value.code == 4
    assert "--curves measures each backend on its own: it does not go with --compare, --workload, --gate" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["bench", "--iters", "0"], "argument --iters: expected an integer >= 1, got '0'"),
        (
            ["bench", "--workload", "round-trip", "--rounds", "0"],
            "argument --rounds: expected an integer >= 1, got '0'",
        ),
        (["bench", "--workload", "round-trip", "--reps", "x"], "argument --reps: expected an integer >= 1, got 'x'"),
        (
            ["bench", "--workload", "round-trip", "--warmup", "-1"],
            "argument --warmup: expected an integer >= 0, got '-1'",
        ),
        (["chaos", "--backend", "uni", "--duration", "-1"], "argument --duration: expected a number of seconds > 0"),
        (["chaos", "--backend", "uni", "--duration", "0"], "argument --duration: expected a number of seconds > 0"),
        (["chaos", "--backend", "uni", "--duration", "nan"], "argument --duration: expected a number of seconds > 0"),
        (["chaos", "--backend", "uni", "--duration", "inf"], "argument --duration: expected a number of seconds > 0"),
        (["chaos", "--backend", "uni", "--soak-share", "1"], "argument --soak-share: expected a number >= 0 and < 1"),
        (
            ["chaos", "--backend", "uni", "--soak-share", "-0.1"],
            "argument --soak-share: expected a number >= 0 and < 1",
        ),
        (
            ["chaos", "--backend", "uni", "--shrink-time", "-1"],
            "argument --shrink-time: expected a number of seconds >= 0",
        ),
        (
            ["chaos", "--backend", "uni", "--operations", "0"],
            "argument --operations: expected an integer >= 1, got '0'",
        ),
        (
            ["chaos", "--backend", "uni", "--world-size", "0"],
            "argument --world-size: expected an integer >= 1, got '0'",
        ),
        (["cluster", "--nodes", "0"], "argument --nodes: expected an integer >= 1, got '0'"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_numeric_options_say_their_real_bound_in_one_wording(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "_cluster", lambda *a: 0)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 4
    assert f": error: {error}" in capsys.readouterr().err


def test_chaos_checks_its_arguments_in_the_words_of_the_command_line() -> None:
    # The finding: --duration -1 said "a number >= 0", then 0 was refused too, in other words.
    from harness.chaos.run import check_arguments

    with pytest.raises(ValueError, match=r"^--duration 0 from a test: expected a number of seconds > 0$"):
        check_arguments("uni", 1, 0.0, where="a test")
    with pytest.raises(ValueError, match=r"^--soak-share 1 from a test: expected a number >= 0 and < 1$"):
        check_arguments("uni", 1, 10.0, soak_share=1.0, where="a test")


# --------------------------------------------------------------------------- output paths


@pytest.mark.parametrize(
    "argv",
    [
        ["chaos", "--backend", "uni", "--world-size", "1", "--json", "/nonexistent/x.json"],
        ["report", "diff", "a.json", "b.json", "--md", "/nonexistent/x.md"],
        ["report", "diff", "a.json", "b.json", "--html", "/nonexistent/x.html"],
        ["report", "html", "a.json", "--output", "/nonexistent/x.html"],
        ["bench", "--json", "/nonexistent/x.json"],
    ],
    ids=lambda a: " ".join(a[:2]) + " " + a[-2],
)
def test_an_output_path_in_no_folder_is_refused_before_the_run(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[object] = []
    for name in ("_chaos", "_report", "_bench"):
        monkeypatch.setattr(cli, name, lambda *a: started.append(a) or 0)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 4
    option = argv[-2]
    assert f"error: argument {option}: cannot write {argv[-1]!r}: the folder '/nonexistent' does not exist" in (
        capsys.readouterr().err
    )
    assert started == []


def test_chaos_json_in_no_folder_is_refused_at_once() -> None:
    done = _harness("chaos", "--backend", "uni", "--world-size", "1", "--json", "/nonexistent/x.json")
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "argument --json: cannot write '/nonexistent/x.json'" in done.stderr


# --------------------------------------------------------------------------- verify


def test_verify_of_no_submission_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path / "nonexistent")]) == 4
    assert f"python -m harness verify: error: argument submission: '{tmp_path / 'nonexistent'}' does not exist" in (
        capsys.readouterr().err
    )
    (tmp_path / "file").write_text("x")
    assert main(["verify", str(tmp_path / "file")]) == 4
    assert "is not a folder" in capsys.readouterr().err
    assert main(["verify", str(tmp_path)]) == 4
    assert "holds neither submission.json nor SHA256SUMS" in capsys.readouterr().err


def test_verify_of_a_broken_submission_is_still_not_conformant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "submission.json").write_text("{}")
    assert main(["verify", str(tmp_path)]) == 1
    assert capsys.readouterr().out.startswith("not conformant")


def test_verify_nonexistent_from_the_command_line_exits_4() -> None:
    done = _harness("verify", "/nonexistent")
    assert (done.returncode, done.stdout) == (4, ""), done.stderr


# --------------------------------------------------------------------------- known failures


def test_a_known_failure_that_applies_to_no_test_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    known = tmp_path / "known.txt"
    known.write_text(
        "# version: mp 1\n"
        "test_c3_args_and_kwargs_reach_a_*[mp-*]  C3: applies\n"
        "test_c3_no_such_test[*]  C3: stale\n"
        "*[nosuch-*]  C9 (after the test): stale too\n"
    )
    done = _harness(
        "conform",
        "--backend",
        "mp",
        "--world-size",
        "1",
        "--clause",
        "C3",
        "--harness-expected-failures",
        str(known),
        "--collect-only",
        "-q",
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert f"{known}:3: test_c3_no_such_test[*]  C3: applies to no test collected in this run" in out, out[-3000:]
    assert f"{known}:4: *[nosuch-*]  C9 (after the test): applies to no test collected in this run" in out
    assert f"{known}:2:" not in out
