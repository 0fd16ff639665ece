"""python -m harness conform's default: a backend's first start method runs every
test, its other start methods one test of every clause (--full: every test)."""

from __future__ import annotations

import re
import subprocess
import sys

from harness.backends import LoadedBackend
from harness.pytest_plugin.options import Options, Variant

MP = LoadedBackend("mp", lambda config: None, start_methods=("fork", "spawn", "forkserver"))
RAY = LoadedBackend("ray", lambda config: None)


def _opts(sample_others: bool, explicit: bool = False) -> Options:
    opts = Options(["mp", "ray"], [1, 2, 4], ["spawn", "fork", "forkserver"], {}, 300.0, True, {})
    opts.start_methods_explicit = explicit
    opts.sample_others = sample_others
    return opts


def test_a_backends_other_start_methods_run_the_sample_and_its_first_every_test() -> None:
    opts = _opts(sample_others=True)
    assert not opts.samples(Variant(MP, 2, "fork"))
    assert opts.samples(Variant(MP, 2, "spawn")) and opts.samples(Variant(MP, 2, "forkserver"))
    # A backend that declares no start methods: the first of the selected ones is its first.
    assert not opts.samples(Variant(RAY, 4, "spawn"))


def test_without_the_setting_or_with_start_methods_named_every_variant_runs_every_test() -> None:
    assert not _opts(sample_others=False).samples(Variant(MP, 2, "spawn"))
    assert not _opts(sample_others=True, explicit=True).samples(Variant(MP, 2, "spawn"))


def _collected(*args: str) -> list[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "conform",
            "--backend",
            "mp",
            "--world-size",
            "2",
            "--collect-only",
            "-q",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    ).stdout
    return [line for line in out.splitlines() if "::test_" in line]


def _of(tests: list[str], method: str) -> list[str]:
    return [t for t in tests if re.search(rf"-ws\d+-{method}[\]-]", t)]


def test_conform_runs_the_sample_for_other_start_methods_unless_full() -> None:
    default, full = _collected(), _collected("--full")
    by_method = {m: _of(default, m) for m in ("fork", "spawn", "forkserver")}
    assert by_method["fork"] == _of(full, "fork")
    for method in ("spawn", "forkserver"):
        everything = _of(full, method)
        assert 0 < len(by_method[method]) < len(everything), (method, len(by_method[method]), len(everything))
        # One test of every clause: the sample keeps each clause's tests of the variant in sight.
        clauses = {t.split("::test_")[1].split("_")[0] for t in everything}
        assert {t.split("::test_")[1].split("_")[0] for t in by_method[method]} == clauses
