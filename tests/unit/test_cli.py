"""The command line: `conform` passes its settings to a fresh pytest, `bench`
checks its arguments, `--version` names the harness and the spec."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import harness
import harness.__main__
import harness.perf.bench
from harness.__main__ import main
from harness.backends import DISTRIBUTION
from harness.contract import SPEC_VERSION

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    seen: list[list[str]] = []

    def fake_run(argv: list[str], log: str | None = None) -> int:
        seen.append(argv)
        return 0

    monkeypatch.setattr(harness.__main__, "run_pytest", fake_run)
    monkeypatch.delenv("HARNESS_WORLD_SIZE", raising=False)
    return seen


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_conform_runs_its_documented_world_sizes_whatever_the_ini_says(calls: list[list[str]]) -> None:
    from harness.pytest_plugin.options import _DEFAULT_WORLD_SIZES

    assert main(["conform", "--backend", "ray"]) == 0
    # No ini is read (-c names an empty one), so the plugin's default holds: 1,2,4.
    assert _flag(calls[0], "-c") == os.devnull and _DEFAULT_WORLD_SIZES == "1,2,4"
    assert "--harness-world-size" not in calls[0]
    assert _flag(calls[0], "--harness-backend") == "ray"


def test_conform_leaves_out_plugins_that_cost_every_run_and_serve_the_suite_nothing(calls: list[list[str]]) -> None:
    assert main(["conform", "--backend", "mp"]) == 0
    blocked = {calls[0][i + 1] for i, arg in enumerate(calls[0]) if arg == "-p"}
    assert {"no:cacheprovider", "no:hypothesispytest"} <= blocked


def test_conform_world_sizes_from_the_command_line_or_the_environment(
    calls: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    main(["conform", "--backend", "mp", "--world-size", "2"])
    monkeypatch.setenv("HARNESS_WORLD_SIZE", "4")
    main(["conform", "--backend", "mp"])
    assert _flag(calls[0], "--harness-world-size") == "2"
    # HARNESS_WORLD_SIZE is the plugin's to read (its pytest inherits the environment),
    # so that a bad value is named as the environment's, not the command line's.
    assert "--harness-world-size" not in calls[1]


def test_conform_passes_the_node_counts_and_require_nodes_on(calls: list[list[str]]) -> None:
    main(["conform", "--backend", "ray", "--world-size", "4", "--nodes", "1,2", "--require-nodes"])
    main(["conform", "--backend", "ray"])
    assert _flag(calls[0], "--harness-nodes") == "1,2" and "--harness-require-nodes" in calls[0]
    assert "--harness-nodes" not in calls[1] and "--harness-require-nodes" not in calls[1]


@pytest.mark.parametrize("keep", [False, True], ids=["removed", "kept with --harness-keep-leftovers"])
def test_conform_runs_its_pytest_in_a_temporary_folder_of_the_runs_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, keep: bool
) -> None:
    """What the run's own process writes to the temporary folder (a cache torch
    makes when a backend imports vLLM) goes with the run: /tmp as it was."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    seen: list[str] = []

    def fake_run(argv: list[str], log: str | None = None) -> int:
        seen.append(os.environ["TMPDIR"])
        (Path(os.environ["TMPDIR"]) / "torchinductor_root").mkdir()
        return 3

    monkeypatch.setattr(harness.__main__, "run_pytest", fake_run)
    extra = ["--", "--harness-keep-leftovers"] if keep else []
    assert main(["conform", "--backend", "mp", *extra]) == 3
    assert Path(seen[0]).parent == tmp_path, "the run's folder lies in the temporary folder the run was given"
    assert os.environ["TMPDIR"] == str(tmp_path), "TMPDIR is restored after the run"
    assert [p.name for p in tmp_path.iterdir()] == ([Path(seen[0]).name] if keep else [])


# --------------------------------------------------------------------------- --version


def test_version_prints_the_harness_and_the_spec_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"harness {harness.__version__} ({DISTRIBUTION}), spec {SPEC_VERSION}"


def test_the_version_is_the_installed_distributions() -> None:
    try:
        installed = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{DISTRIBUTION} is not installed (harness taken from PYTHONPATH)")
    assert harness.__version__ == installed


@pytest.mark.parametrize("command", [[sys.executable, "-m", "harness"], ["harness"]], ids=["python -m", "script"])
def test_version_from_the_command_line(command: list[str]) -> None:
    if command == ["harness"]:
        script = shutil.which("harness", path=os.path.dirname(sys.executable))
        if script is None:
            pytest.skip("the harness console script is not installed next to this interpreter")
        command = [script]
    done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"harness {harness.__version__} ({DISTRIBUTION}), spec {SPEC_VERSION}\n"


# --------------------------------------------------------------------------- bench arguments


@pytest.fixture
def bench_runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def fake_run(**kwargs: Any) -> dict[str, Any]:
        seen.append(kwargs)
        return {}

    monkeypatch.setattr(harness.perf.bench, "run", fake_run)
    return seen


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--world-size", "0"], "argument --world-size: expected comma-separated integers >= 1, got '0'"),
        (["--world-size", "abc"], "argument --world-size: expected comma-separated integers >= 1, got 'abc'"),
        (["--world-size", "1,-2"], "argument --world-size: expected comma-separated integers >= 1, got '1,-2'"),
        (["--world-size", "2,"], "argument --world-size: expected comma-separated integers >= 1, got '2,'"),
        (["--world-size", ""], "argument --world-size: expected comma-separated integers >= 1, got ''"),
        (["--iters", "0"], "argument --iters: expected an integer >= 1, got '0'"),
        (["--iters", "-5"], "argument --iters: expected an integer >= 1, got '-5'"),
        (["--iters", "abc"], "argument --iters: expected an integer >= 1, got 'abc'"),
        (["--iters", "1.5"], "argument --iters: expected an integer >= 1, got '1.5'"),
        (["--backend", "nosuch"], "argument --backend: unknown backend 'nosuch'"),
        (["--backend", "uni", "--world-size", "1,2"], "argument --world-size: backend 'uni' runs world sizes 1, got 2"),
        (["--json", "/nonexistent/figures.json"], "argument --json: cannot write '/nonexistent/figures.json'"),
    ],
)
def test_bench_refuses_bad_arguments_in_one_line_naming_the_option_and_value(
    args: list[str], error: str, bench_runs: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", *args])
    assert info.value.code == 4  # usage error
    err = capsys.readouterr().err
    last = err.rstrip("\n").splitlines()[-1]
    assert last.startswith(f"python -m harness bench: error: {error}"), err
    assert "Traceback" not in err
    assert bench_runs == []


def test_bench_world_size_zero_exits_at_once_instead_of_hanging() -> None:
    # The finding: `bench --world-size 0` waited forever for replies from no worker.
    done = subprocess.run(
        [sys.executable, "-m", "harness", "bench", "--world-size", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 4  # usage error
    assert done.stderr.splitlines()[-1] == (
        "python -m harness bench: error: argument --world-size: expected comma-separated integers >= 1, got '0'"
    )


def test_bench_passes_valid_arguments_on(bench_runs: list[dict[str, Any]]) -> None:
    assert main(["bench", "--backend", "mp", "--world-size", "1, 2", "--iters", "7"]) == 0
    assert main(["bench", "--quick"]) == 0
    assert bench_runs == [
        {"backends": ["mp"], "world_sizes": [1, 2], "iters": 7, "idle_s": 5.0},
        {"backends": ["mp"], "world_sizes": [1, 2, 4], "iters": 500, "idle_s": 2.0},
    ]


def _suite_source() -> str:
    return "".join(p.read_text() for p in sorted((ROOT / "harness" / "conformance").glob("test_*.py")))


def _suite_tests() -> list[str]:
    import ast

    names = []
    for path in sorted((ROOT / "harness" / "conformance").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        names += [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    return names


def test_the_sample_names_one_test_of_every_clause() -> None:
    from harness.conformance.sample import SAMPLE
    from harness.contract import CLAUSES

    tests = _suite_tests()
    for part in SAMPLE:
        # A test's name, then (joined by " and ") parts of its parameters' ids.
        name, *params = part.split(" and ")
        assert any(name in t for t in tests), f"sample entry {part!r} matches no test of the suite"
        assert all(f'"{p}"' in _suite_source() for p in params), f"sample entry {part!r}: no such parameter"
    clauses = [f"C{part[1:].split('_')[0]}" for part in SAMPLE]
    assert sorted(clauses, key=lambda c: int(c[1:])) == list(CLAUSES), clauses


def test_sample_narrowed_by_k_keeps_both() -> None:
    from harness.conformance.sample import sample_expression

    assert sample_expression("mp").endswith(") and (mp)")
    assert sample_expression().startswith("(c1_blocking_call_returns) or ")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--nodes", "0"], "argument --nodes: expected an integer >= 1, got '0'"),
        (["--cpus-per-node", "two"], "argument --cpus-per-node: expected an integer >= 1, got 'two'"),
        (["echo", "hi"], "unrecognized arguments: echo hi (the command goes after --)"),
    ],
)
def test_cluster_refuses_bad_arguments_in_one_line_naming_the_option_and_value(
    args: list[str], error: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[object] = []
    monkeypatch.setattr(harness.__main__, "_cluster", lambda *a: started.append(a) or 0)
    with pytest.raises(SystemExit) as info:
        main(["cluster", *args, "--", "true"])
    assert info.value.code == 4  # usage error
    last = capsys.readouterr().err.rstrip("\n").splitlines()[-1]
    assert last.startswith(f"python -m harness cluster: error: {error}"), last
    assert started == []


def test_cluster_takes_its_command_after_the_double_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple[int, int, list[str]]] = []
    monkeypatch.setattr(
        harness.__main__,
        "_cluster",
        lambda args, command: started.append((args.nodes, args.cpus_per_node, command)) or 0,
    )
    assert main(["cluster", "--nodes", "3", "--", "python", "-c", "print(1)", "--nodes", "9"]) == 0
    assert started == [(3, 2, ["python", "-c", "print(1)", "--nodes", "9"])]
