"""How long the suite takes, and where the time goes: the figures of the
"CPU tier in 10 minutes" work, reproducible from the repository.

    python tests/perf/scripts/suite_times.py overhead            # harness overhead per test, no executor
    python tests/perf/scripts/suite_times.py breakdown [ARGS]    # one pytest run, time per phase and variant
    python tests/perf/scripts/suite_times.py table [ROW ...]     # the wall time of each row of the target table
    python tests/perf/scripts/suite_times.py cpu [--top N] -- CMD  # where CMD's CPU goes (a make job, conform, pytest)

``breakdown`` runs ``python -m pytest ARGS --durations=0`` (default ARGS: the
suite for the built-in backends, ``-m "not gpu" tests/distributed``) and sums
pytest's own per-phase durations by variant: setup (the test process's
fixtures: the executor's start-up), call (the test body: its waits), teardown
(shutdown and leak checks). What the wall time holds beyond that sum is the
harness's own work between tests (fork, reports, the matrix) and, with
``--jobs`` above 1, the overlap of tests running side by side.

Figures are wall-clock seconds on the machine that runs the script; compare
them as ratios within one run: shared machines are noisy.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time

ROWS = {
    "test": [sys.executable, "-m", "pytest", "-m", "not gpu", "-q"],
    "conform": [sys.executable, "-m", "harness", "conform", "--backend", "uni,mp,ray", "--world-size", "1,2,4", "-q"],
    "conform-mp": [sys.executable, "-m", "harness", "conform", "--backend", "mp", "-q"],
    "conform-ray-2": [sys.executable, "-m", "harness", "conform", "--backend", "ray", "--world-size", "2", "-q"],
}

_DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+)$")
_VARIANT = re.compile(r"\[([^\]-]+-ws\d+-[a-z]+)")

_TRIVIAL = textwrap.dedent(
    """
    import pytest

    @pytest.mark.parametrize("i", range({n}))
    @pytest.mark.harness_distributed
    def test_nothing(i):
        pass
    """
)


def _busy() -> float:
    """CPU seconds this machine has spent busy (not idle or waiting on I/O), all cores."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [float(v) for v in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _timed(cmd: list[str], cwd: str | None = None) -> tuple[float, str, int]:
    """Wall seconds, output and exit status of ``cmd``; prints how busy the machine's CPUs were."""
    before = _busy()
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    # The whole machine's: Ray's workers, for one, are not this process's descendants.
    cpu = _busy() - before
    print(f"  [{wall:.1f} s wall; the machine's CPUs were {cpu / wall:.2f} cores busy on average]", flush=True)
    return wall, proc.stdout + proc.stderr, proc.returncode


def overhead(n: int) -> None:
    """Wall time per test of ``n`` empty tests run isolated (a forked process
    each) against the same tests in pytest's own process."""
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "test_trivial.py"), "w", encoding="utf-8") as f:
            f.write(_TRIVIAL.format(n=n))
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", folder]
        for jobs in ("1", "auto"):
            isolated, out, rc = _timed([*base, "--harness-jobs", jobs, "test_trivial.py"], cwd=folder)
            inproc, out2, rc2 = _timed([*base, "--harness-isolate", "no", "test_trivial.py"], cwd=folder)
            if rc or rc2:
                sys.exit(f"the trivial run failed:\n{out}\n{out2}")
            print(
                f"{n} empty tests, --harness-jobs {jobs}: isolated {isolated:.2f} s, in-process {inproc:.2f} s; "
                f"overhead per test {(isolated - inproc) / n * 1000:.0f} ms"
            )


def breakdown(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "pytest", *(args or ["-m", "not gpu", "tests/distributed"])]
    cmd += ["-q", "-p", "no:cacheprovider", "--durations=0", "--durations-min=0"]
    print("$", " ".join(cmd), flush=True)
    wall, out, rc = _timed(cmd)
    sums: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    counts: collections.Counter[str] = collections.Counter()
    for line in out.splitlines():
        m = _DURATION.match(line.strip())
        if not m:
            continue
        seconds, phase, nodeid = float(m.group(1)), m.group(2), m.group(3)
        v = _VARIANT.search(nodeid)
        key = v.group(1) if v else nodeid.split("::")[0]
        sums[key][phase] += seconds
        if phase == "setup":
            counts[key] += 1
    print(f"{'variant or file':40} {'tests':>5} {'setup':>8} {'call':>8} {'teardown':>8} {'sum':>8}")
    total = 0.0
    for key in sorted(sums):
        s = sums[key]
        row = s["setup"] + s["call"] + s["teardown"]
        total += row
        print(f"{key:40} {counts[key]:5d} {s['setup']:8.1f} {s['call']:8.1f} {s['teardown']:8.1f} {row:8.1f}")
    print(f"phases summed: {total:.1f} s; wall: {wall:.1f} s (exit {rc})")
    slowest = sorted(
        (m for m in map(_DURATION.match, map(str.strip, out.splitlines())) if m), key=lambda m: -float(m.group(1))
    )
    for line in out.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            print(line)
    print("slowest phases:")
    for m in slowest[:15]:
        print(f"  {m.group(1):>7}s {m.group(2):8} {m.group(3)}")
    print(out.strip().splitlines()[-1] if out.strip() else "")


_CLAUSE = re.compile(r"::test_(c\d+)_")
_FAMILY_VARIANT = re.compile(r"\[([^\]-]+)-ws\d+-([a-z]+)")


def family(nodeid: str) -> str:
    """A test's family: clause x backend x start method for the suite's tests
    (``C10 mp spawn``), else its file."""
    path = nodeid.split("::", maxsplit=1)[0]
    clause = _CLAUSE.search(nodeid)
    variant = _FAMILY_VARIANT.search(nodeid)
    if clause and variant:
        return f"{clause.group(1).upper()} {variant.group(1)} {variant.group(2)}"
    if variant:
        return f"{path} {variant.group(1)} {variant.group(2)}"
    return path


_NOISE = ("-c", "--rootdir", "--confcutdir", "-p", "--report-json", "--report-md", "--report-html", "--junitxml")


def run_label(run: str) -> str:
    """A pytest run's command line without what every run has (its config,
    root, plugins, report files): what tells one make job's run from another."""
    words, out, skip = run.split(), [], False
    for word in words[1:]:
        if skip:
            skip = False
        elif word in _NOISE:
            skip = True
        elif not word.startswith(("--durations", "--harness-report", "-q")):
            out.append(word.replace(os.getcwd() + "/", ""))
    return " ".join(out) or run


def cpu(cmd: list[str], top: int) -> None:
    """Run ``cmd`` with every isolated test's CPU logged (HARNESS_CPU_LOG), then
    print the whole command's figures and its test families by CPU."""
    if not cmd:
        sys.exit("cpu: no command given after --")
    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "cpu.jsonl")
        print("$", " ".join(cmd), flush=True)
        before, start = _busy(), time.monotonic()
        rc = subprocess.run(cmd, env={**os.environ, "HARNESS_CPU_LOG": log}, check=False).returncode
        wall, busy = time.monotonic() - start, _busy() - before
        rows = []
        if os.path.exists(log):
            with open(log, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f if line.strip()]
    runs = [row for row in rows if "run_cpu" in row]
    rows = [row for row in rows if "test" in row]
    if runs:
        print(f"\n{'pytest run (a make job runs one or more)':72} {'CPU s':>8} {'wall s':>8} {'cores':>6}")
        for run in sorted(runs, key=lambda r: -float(r["run_cpu"])):
            wall_s = float(run["run_wall"]) or 1.0
            label, cores = run_label(run["run"])[:72], run["run_cpu"] / wall_s
            print(f"{label:72} {run['run_cpu']:8.0f} {run['run_wall']:8.0f} {cores:6.2f}")
        print(
            "  (a run's CPU: its own process and every process it reaped, the tests and their workers; "
            "not a Ray cluster's processes)"
        )
    sums: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in rows:
        key = family(row["test"])
        sums[key]["tests"] += 1
        for phase in ("setup", "call", "teardown"):
            sums[key][phase] += float(row["cpu"].get(phase, 0.0))
            sums[key]["wall"] += float(row["wall"].get(phase, 0.0))
    in_tests = sum(s["setup"] + s["call"] + s["teardown"] for s in sums.values())
    print(f"\nexit {rc}; {wall:.0f} s wall; the machine's CPU: {busy:.0f} s ({busy / wall:.2f} cores on average)")
    print(
        f"isolated tests: {len(rows)}, {in_tests:.0f} s of CPU (their processes and the workers they started); "
        f"the rest, {busy - in_tests:.0f} s: pytest's own processes, tests run in them, Ray clusters, "
        "and anything else on the machine"
    )
    print(
        f"\n{'family (clause backend start-method, or file)':48} {'tests':>5} {'start-up':>9} {'check':>8} "
        f"{'teardown':>9} {'CPU s':>8} {'wall s':>8}"
    )
    ranked = sorted(sums.items(), key=lambda kv: -(kv[1]["setup"] + kv[1]["call"] + kv[1]["teardown"]))
    for key, s in ranked[:top]:
        total = s["setup"] + s["call"] + s["teardown"]
        print(
            f"{key[:48]:48} {s['tests']:5d} {s['setup']:9.1f} {s['call']:8.1f} {s['teardown']:9.1f} "
            f"{total:8.1f} {s['wall']:8.1f}"
        )
    if len(ranked) > top:
        rest = ranked[top:]
        total = sum(s["setup"] + s["call"] + s["teardown"] for _, s in rest)
        print(
            f"{f'({len(rest)} more families)':48} {sum(s['tests'] for _, s in rest):5d} {'':9} {'':8} {'':9} "
            f"{total:8.1f}"
        )
    phases = {p: sum(s[p] for s in sums.values()) for p in ("setup", "call", "teardown")}
    print(
        f"{'all':48} {len(rows):5d} {phases['setup']:9.1f} {phases['call']:8.1f} {phases['teardown']:9.1f} "
        f"{in_tests:8.1f}"
    )
    sys.exit(rc)


def table(rows: list[str]) -> None:
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        sys.exit(f"unknown row {unknown[0]!r} on the command line: expected some of {', '.join(ROWS)}")
    for name in rows or list(ROWS):
        wall, out, rc = _timed(ROWS[name])
        last = out.strip().splitlines()[-1] if out.strip() else ""
        print(f"{name:14} {wall:7.1f} s  exit {rc}  {' '.join(ROWS[name][1:])}  | {last}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("overhead")
    p.add_argument("-n", type=int, default=50)
    sub.add_parser("breakdown", help="then pytest's arguments")
    sub.add_parser("table").add_argument("rows", nargs="*", help=f"some of: {', '.join(ROWS)} (default: all)")
    p = sub.add_parser("cpu", help="then --, then the command")
    p.add_argument("--top", type=int, default=25)
    if sys.argv[1:2] == ["breakdown"]:  # everything after it is pytest's
        breakdown(sys.argv[2:])
        return
    if sys.argv[1:2] == ["cpu"]:  # everything after -- is the command's
        rest = sys.argv[2:]
        at = rest.index("--") if "--" in rest else len(rest)
        top = parser.parse_args(["cpu", *rest[:at]]).top
        cpu(rest[at + 1 :], top)
        return
    ns = parser.parse_args()
    if ns.what == "overhead":
        overhead(ns.n)
    else:
        table(ns.rows)


if __name__ == "__main__":
    main()
