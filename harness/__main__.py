"""Command line: ``python -m harness conform …`` and ``python -m harness bench …``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def _conform(args: argparse.Namespace) -> int:
    import subprocess

    # A fresh interpreter: this one has imported harness already, which pytest
    # would rather rewrite on import (and the suite's own isolation forks it).
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "harness.conformance",
        "-p",
        "no:cacheprovider",
        "-q",
        "--backend",
        args.backend,
    ]
    passed_on = {
        "world_size": "--world-size",
        "start_method": "--start-method",
        "declare": "--declare",
        "report_json": "--report-json",
        "report_md": "--report-md",
        "timeout": "--harness-timeout",
        "k": "-k",
    }
    for attr, flag in passed_on.items():
        value = getattr(args, attr)
        if value:
            argv += [flag, value]
    if not args.world_size:
        # Its documented default, whatever ini the current folder has (a project
        # may narrow a backend's world sizes for its own CI).
        import os

        argv += ["--world-size", os.environ.get("HARNESS_WORLD_SIZE") or "1,2,4"]
    return subprocess.call(argv)


def _bench(args: argparse.Namespace) -> int:
    from harness.bench import run

    world_sizes = [int(w) for w in args.world_size.split(",")]
    iters = 500 if args.quick else args.iters
    idle_s = 2.0 if args.quick else 5.0
    figures = run(backends=args.backend.split(","), world_sizes=world_sizes, iters=iters, idle_s=idle_s)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=2)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    conform = sub.add_parser("conform", help="run the conformance suite against a backend and print the matrix")
    conform.add_argument("--backend", required=True, help="built-in name(s), 'module:attr', or entry point(s)")
    conform.add_argument("--world-size", help="comma-separated world sizes (default: HARNESS_WORLD_SIZE, else 1,2,4)")
    conform.add_argument("--start-method", help="comma-separated start methods (default: every one a backend supports)")
    conform.add_argument("--declare", help="clauses to treat as declared unsupported, e.g. C12,C22")
    conform.add_argument("--report-json", help="write the matrix as JSON to this path")
    conform.add_argument("--report-md", help="write the matrix as Markdown to this path")
    conform.add_argument("--timeout", help="seconds before a test is killed with its processes (default 300)")
    conform.add_argument("-k", help="only tests matching this pytest -k expression")
    conform.set_defaults(func=_conform)
    bench = sub.add_parser("bench", help="round-trip latency of an empty collective_rpc, with yardsticks")
    bench.add_argument("--backend", default="mp", help="backend(s) to measure (default mp)")
    bench.add_argument("--world-size", default="1,2,4", help="comma-separated world sizes (default 1,2,4)")
    bench.add_argument("--iters", type=int, default=2000, help="timed calls per measurement (default 2000)")
    bench.add_argument("--quick", action="store_true", help="500 calls per measurement, 2 s idle check")
    bench.add_argument("--json", help="write the figures as JSON to this path")
    bench.set_defaults(func=_bench)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
