"""``python -m harness bench`` with workloads: against a stored baseline, or A/B.

    harness bench --workload engine-step --backend mp --world-size 2
        measure, compare with this machine's stored baseline (or say how to record one)
    harness bench --workload engine-step --backend mp --world-size 2 --update-baseline
        measure and store the baseline of this machine's fingerprint
    harness bench --compare A B [--workload engine-step] [--gate METRIC]
        both sides in one run, round by round, one side's executor alive at a time;
        exit 1 when B is significantly slower on any metric of the caller's side
        (engine-step: the step or the caller's CPU per step), or on METRIC alone
    harness bench --curves payload,world-size --backend mp [--plot costs.png]
        how the round trip grows with the payload (next to a plain copy) and
        with the world size; notes where cost grows faster than the work

Exit status (the command line's one convention, pytest's: harness/__main__.py):
0 when nothing is significantly slower (or a baseline was written), 1 when a
judged metric of a comparison is (the last line names which), 2 interrupted, 3
an internal error, 4 bad input (refused before the first round: never read as
"B is slower").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.perf._extra import missing
from harness.perf.stats import ALPHA, MIN_SAMPLES, Verdict, fewest_samples, split_alpha
from harness.perf.workloads import WORKLOADS, Samples, Workload, judged_metrics, workload
from harness.system.paths import check_writable

if TYPE_CHECKING:
    from harness.perf.baseline import Entry

__all__ = ["add_arguments", "run"]


def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``, in the words of the other commands' counts."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return value

    return parse


def add_arguments(bench: argparse.ArgumentParser) -> None:
    g = bench.add_argument_group("workloads (tests/perf; with any of these options)")
    g.add_argument("--workload", help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    g.add_argument("--compare", nargs=2, metavar=("A", "B"), help="A/B run: two backends, or one with two settings")
    g.add_argument(
        "--gate",
        metavar="METRIC",
        help="judge this metric alone (default: every metric of the caller's side: engine-step's step and "
        "caller CPU, round-trip's latency, pipelined's time per call; B is slower when any of them is)",
    )
    # 40 rounds of 25: the sizes behind the power figures (tests/perf/scripts/power.py).
    g.add_argument("--rounds", type=_int_at_least(1), default=40, help="alternating batches per side (default 40)")
    g.add_argument(
        "--reps",
        type=_int_at_least(1),
        default=None,
        help="steps per batch (default: the workload's: engine-step 25, pipelined 100 windows, round-trip 500)",
    )
    g.add_argument("--warmup", type=_int_at_least(0), default=10, help="steps before the first batch (default 10)")
    g.add_argument("--baseline-dir", default=None, help="where baselines are (default tests/perf/baselines)")
    g.add_argument("--update-baseline", action="store_true", help="store this run as the machine's baseline")
    g.add_argument("--plot", help="draw the run against its baseline or the A side to this PNG")
    g.add_argument(
        "--curves",
        help=f"comma-separated, of: {', '.join(CURVES)}: cost against payload size (at the first --world-size) "
        "and against world size (the --world-size list, else 1, 2, 4, 8 where the cores allow)",
    )


CURVES = ("payload", "world-size")


def wants_workloads(args: argparse.Namespace) -> bool:
    return bool(args.workload or args.compare or args.update_baseline or args.curves)


def _curves(args: argparse.Namespace) -> list[str]:
    names = [n.strip() for n in (args.curves or "").split(",") if n.strip()]
    for n in names:
        if n not in CURVES:
            raise ValueError(f"unknown curve {n!r} from --curves: expected one of {', '.join(CURVES)}")
    if args.curves is not None and not names:
        raise ValueError(f"--curves {args.curves!r} names no curve: expected one of {', '.join(CURVES)}")
    return names


def _workloads(args: argparse.Namespace) -> list[Callable[[], Workload]]:
    names = [n.strip() for n in (args.workload or "engine-step").split(",") if n.strip()]
    for n in names:
        workload(n, "--workload")  # the error names the value
    return [WORKLOADS[n] for n in names]


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Bad input fails before anything starts, naming the option and the value."""
    from harness.backends import load_backend
    from harness.perf.runner import parse_side

    try:
        makes = _workloads(args)
        _curves(args)
    except ValueError as exc:
        parser.error(str(exc))
    # Before the gate's check: a gate beside --curves judges nothing, whatever its name.
    if args.curves and (args.compare or args.update_baseline or args.workload or args.gate is not None):
        parser.error(
            "--curves measures each backend on its own: it does not go with --compare, --workload, --gate "
            "or --update-baseline"
        )
    try:
        for text in args.compare or []:
            load_backend(parse_side(text, "--compare").spec, where="--compare")
    except (ImportError, ValueError, TypeError) as exc:
        parser.error(f"argument --compare: {exc}")
    for w in [make() for make in makes] if args.gate is not None else []:
        if args.gate not in w.metrics:
            parser.error(
                f"argument --gate: {args.gate!r} is not a metric of workload {w.name!r}: "
                f"it measures {', '.join(repr(m) for m in w.metrics)}"
            )
    if args.compare and args.update_baseline:
        parser.error("--update-baseline records one backend's run; it does not go with --compare")
    if args.compare:
        # Each judged metric's share of alpha sets the fewest rounds that can reach it.
        judged = max(len(judged_metrics(make(), args.gate)) for make in makes)
        fewest = max(MIN_SAMPLES, fewest_samples(split_alpha(ALPHA, judged)))
        if args.rounds < fewest:
            each = f" to reach p < {split_alpha(ALPHA, judged):g} on each of the {judged} metrics judged"
            parser.error(
                f"argument --rounds: {args.rounds}: an A/B run judges one median per round, and each side needs "
                f"at least {fewest} rounds" + (each if judged > 1 else "")
            )
    # Checked before the first round: an A/B run measures for minutes, then compares.
    needs = [("scipy", "--compare")] if args.compare else []
    needs += [("matplotlib", "--plot")] if args.plot else []
    for module, option in needs:
        if importlib.util.find_spec(module) is None:
            parser.error(f"argument {option}: {missing(module, option).args[0]}")
    check_writable(parser, "--plot", args.plot)


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    if args.curves:
        return _costs(args, out)
    if args.compare:
        return _ab(args, out)
    return _against_baseline(args, out)


def _ab(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from harness.perf.ab import run_ab
    from harness.perf.runner import parse_side

    a, b = (parse_side(t, "--compare") for t in args.compare)
    results = []
    plots: dict[str, tuple[list[float], list[float]]] = {}
    verdicts: dict[str, str] = {}
    report: list[dict[str, Any]] = []
    for make in _workloads(args):
        for ws in args.world_size:
            result = run_ab(a, b, make, ws, rounds=args.rounds, reps=args.reps, warmup=args.warmup, gate=args.gate)
            for line in result.lines():
                out(line)
            results.append(result)
            la, lb = list(result.samples)
            for metric, verdict in result.verdicts.items():
                plots[f"{result.workload} ws={ws} {metric}"] = (result.samples[la][metric], result.samples[lb][metric])
                verdicts[f"{result.workload} ws={ws} {metric}"] = verdict.message
            report.append(
                {
                    "workload": result.workload,
                    "world_size": ws,
                    # A list since every metric of the caller's side is judged (one name before).
                    "gate": list(result.gate),
                    "slower": result.slower,
                    "verdicts": {m: v.to_dict() for m, v in result.verdicts.items()},
                    "load_per_cpu": round(result.load_per_cpu, 2),
                }
            )
    if args.plot:
        from harness.perf.plot import plot_comparison

        plot_comparison(args.plot, plots, labels=(f"A: {a.text}", f"B: {b.text}"), title="A/B", verdicts=verdicts)
        out(f"plot: {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    several = len(results) > 1
    out(
        verdict_line(
            "B",
            "A",
            [(f"{r.workload} ws={r.world_size} " if several else "", r.verdicts[m]) for r in results for m in r.slower],
            list(dict.fromkeys(m for r in results for m in r.gate)),
        )
    )
    return 1 if any(r.b_is_slower for r in results) else 0


def verdict_line(b: str, a: str, slower: list[tuple[str, Verdict]], judged: list[str]) -> str:
    """The last line, the one a CI log shows: which judged metrics are slower
    ("B is slower than A: caller CPU +52.5 %"), or which were judged."""
    if slower:
        return f"{b} is slower than {a}: " + ", ".join(f"{where}{v.metric} {v.change}" for where, v in slower)
    return f"{b} is not significantly slower than {a} (judged: {', '.join(judged)})"


def _record_command(args: argparse.Namespace) -> str:
    argv = ["python", "-m", "harness", "bench", "--workload", args.workload or "engine-step"]
    argv += ["--backend", args.backend, "--world-size", ",".join(map(str, args.world_size)), "--update-baseline"]
    return " ".join(shlex.quote(a) for a in argv)


def _against_baseline(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from harness.perf.baseline import (
        BASELINE_FOLDER,
        Baseline,
        Entry,
        baseline_path,
        find_baseline,
        git_commit,
        machine_fingerprint,
        store_baseline,
    )
    from harness.perf.runner import open_side, parse_side, run_rounds, split_sides
    from harness.perf.stats import SLOWER

    folder = Path(args.baseline_dir or BASELINE_FOLDER)
    fp = machine_fingerprint()
    path = baseline_path(folder, fp)
    stored = find_baseline(folder, fp)
    if stored is None and not args.update_baseline:
        out(f"no baseline for this machine ({fp.id}) in {folder}: nothing to compare with. Record one with:")
        out(f"  {_record_command(args)}")
    baseline = stored or Baseline(fp, commit=git_commit())
    slower: list[tuple[str, Verdict]] = []
    judged_all: list[str] = []
    plots: dict[str, tuple[list[float], list[float]]] = {}
    verdicts: dict[str, str] = {}
    for backend in split_sides(args.backend):
        side = parse_side(backend, "--backend")
        device = side.settings.get("device", "cpu")
        for make in _workloads(args):
            for ws in args.world_size:
                w = make()
                if hasattr(w, "device"):  # the workload's tensors go where the side's workers compute
                    w.device = device
                entry = stored.lookup(side.text, w.name, ws, device) if stored else None
                if entry is not None and not args.update_baseline:
                    w.use(entry.params)
                with open_side(side, ws) as ex:
                    samples: Samples = run_rounds(
                        {side.text: ex}, w, ws, rounds=args.rounds, reps=args.reps or w.default_reps, warmup=args.warmup
                    )[side.text]
                _print_summary(out, side.text, w.name, ws, samples)
                if args.update_baseline:
                    baseline = baseline.with_entry(
                        Entry.measured(side.text, w.name, ws, device, samples, commit=git_commit(), params=w.params())
                    )
                    continue
                if entry is None:
                    if stored is not None:
                        out(
                            f"  no baseline entry for {side.text} {w.name} ws={ws} {device} in {path}; record: "
                            f"{_record_command(args)}"
                        )
                    continue
                for metric, v, judged in _against_entry(entry, path, w, ws, samples, args.gate):
                    if isinstance(v, str):  # a metric the baseline measured otherwise
                        out(f"  {'':>9}  {v}")
                        continue
                    out(f"  {v.decision:>9}  {v.message}" + ("  <- gate" if judged else ""))
                    judged_all += [v.metric] if judged else []
                    slower += [("", v)] if judged and v.decision == SLOWER else []
                    plots[v.metric] = (list(entry.metrics[metric].samples), samples[metric])
                    verdicts[v.metric] = v.message
    if args.update_baseline:
        store_baseline(path, baseline)
        out(f"baseline stored: {path}")
        return 0
    if args.plot and plots:
        from harness.perf.plot import plot_comparison

        plot_comparison(args.plot, plots, labels=("baseline", "this run"), title=str(path), verdicts=verdicts)
        out(f"plot: {args.plot}")
    if judged_all:
        out(verdict_line("this run", "the baseline", slower, judged_all))
    return 1 if slower else 0


def _against_entry(
    entry: Entry, path: Path, w: Workload, ws: int, samples: Samples, gate: str | None
) -> list[tuple[str, Verdict | str, bool]]:
    """This run's samples against a baseline entry's, metric by metric: (metric,
    verdict, judged). Judged as an A/B run judges: every metric of the caller's
    side (or ``gate`` alone), each at its share of alpha, the others reported;
    a metric the baseline measured another way gets a note, not a verdict."""
    from harness.perf.stats import compare

    judged = judged_metrics(w, gate)
    each = split_alpha(ALPHA, len(judged))
    out: list[tuple[str, Verdict | str, bool]] = []
    comparable = getattr(w, "comparable", None)
    for metric, values in samples.items():
        if metric not in entry.metrics or len(values) < MIN_SAMPLES:
            continue
        why = comparable(metric, entry.params) if comparable is not None else None
        if why is not None:
            out.append((metric, f"{w.name} ws={ws} {metric}: not compared: {why}; re-record the baseline", False))
            continue
        v = compare(
            entry.metrics[metric].samples, values, f"{w.name} ws={ws} {metric}", entry.against(path), alpha=each
        )
        out.append((metric, v, metric in judged))
    return out


def _print_summary(out: Callable[[str], None], backend: str, name: str, ws: int, samples: Samples) -> None:
    from harness.perf.stats import format_seconds, summary

    for metric, values in samples.items():
        s = summary(values, metric) if len(values) >= 1 else None
        if s is None:
            continue
        out(
            f"{backend:<10} {name:<12} ws={ws} {metric:<12} median {format_seconds(s.median):>10}  "
            f"p90 {format_seconds(s.p90):>10}  p99 {format_seconds(s.p99):>10}  n={s.n}"
        )


def _costs(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    import contextlib

    from harness.perf import curves
    from harness.perf.runner import open_side, parse_side, split_sides

    wanted = _curves(args)
    explicit_ws = getattr(args, "world_size_explicit", False)
    payload_series: dict[str, list[tuple[float, float]]] = {}
    world_series: dict[str, list[tuple[float, float]]] = {}
    notes: list[str] = []
    report: list[dict[str, Any]] = []
    for backend in split_sides(args.backend):
        side = parse_side(backend, "--backend")
        payload: list[curves.PayloadPoint] = []
        world: list[curves.WorldSizePoint] = []
        if "payload" in wanted:
            ws = args.world_size[0]
            out(f"{side.text}: round trip against payload size, ws={ws} (the request carries the bytes to every rank)")
            with open_side(side, ws) as ex:
                payload = curves.payload_curve(ex, progress=lambda line: out("  " + line))
            payload_series[f"{side.text} call"] = [(p.size, p.throughput / curves.MiB) for p in payload]
            payload_series.setdefault(
                "plain copy (floor)", [(p.size, p.floor_throughput / curves.MiB) for p in payload]
            )
        if "world-size" in wanted:
            sizes = args.world_size if explicit_ws else curves.default_world_sizes()
            out(f"{side.text}: empty round trip against world size {', '.join(map(str, sizes))}")

            def opened(ws: int, side: Any = side) -> contextlib.AbstractContextManager[Any]:
                return open_side(side, ws)

            world = curves.world_size_curve(opened, sizes, progress=lambda line: out("  " + line))
            world_series[side.text] = [(p.world_size, p.call_s * 1e6) for p in world]
        found = curves.growth_notes(payload, world)
        for note in found:
            out(f"  note: {side.text}: {note}")
        if not found:
            out(f"  {side.text}: no cost grows faster than its work")
        notes += found
        report.append(
            {
                "backend": side.text,
                "payload": [dict(size=p.size, call_s=p.call_s, copy_s=p.floor_s, reps=p.reps) for p in payload],
                "world_size": [dict(world_size=p.world_size, call_s=p.call_s, reps=p.reps) for p in world],
                "notes": found,
            }
        )
    if args.plot:
        from harness.perf.plot import plot_curves

        target = Path(args.plot)
        if payload_series:
            path = target.with_name(f"{target.stem}-payload{target.suffix or '.png'}")
            plot_curves(
                path,
                payload_series,
                "payload (bytes)",
                "throughput (MiB/s)",
                log_y=True,
                title="round trip against payload size",
            )
            out(f"plot: {path}")
        if world_series:
            path = target.with_name(f"{target.stem}-world-size{target.suffix or '.png'}")
            plot_curves(path, world_series, "world size", "empty call (us)", title="round trip against world size")
            out(f"plot: {path}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0
