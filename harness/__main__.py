"""Command line: ``python -m harness conform …`` and ``python -m harness bench …``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def _version() -> str:
    from harness import __version__
    from harness.backends import DISTRIBUTION
    from harness.contract import SPEC_VERSION

    return f"harness {__version__} ({DISTRIBUTION}), spec {SPEC_VERSION}"


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


def _positive_int(text: str) -> int:
    """An argparse type: an int >= 1 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _world_sizes(text: str) -> list[int]:
    """An argparse type: comma-separated ints >= 1."""
    sizes = []
    for part in text.split(","):
        try:
            sizes.append(_positive_int(part.strip()))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated integers >= 1, got {text!r}"
            ) from None
    return sizes


def _check_bench_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fail on what the run would hit only after minutes: a backend that does
    not load, a world size it does not run, a JSON path that cannot be written."""
    from harness.backends import load_backend

    for name in args.backend.split(","):
        try:
            loaded = load_backend(name)
        except (ImportError, ValueError, TypeError) as exc:
            parser.error(f"argument --backend: {exc}")
        if loaded.world_sizes is not None:
            for ws in args.world_size:
                if ws not in loaded.world_sizes:
                    parser.error(
                        f"argument --world-size: backend {name!r} runs world sizes "
                        f"{', '.join(map(str, loaded.world_sizes))}, got {ws}"
                    )
    if args.json:
        import os

        folder = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            parser.error(f"argument --json: cannot write {args.json!r}: {folder!r} is not a writable folder")


def _bench(args: argparse.Namespace) -> int:
    from harness.bench import run

    iters = 500 if args.quick else args.iters
    idle_s = 2.0 if args.quick else 5.0
    figures = run(backends=args.backend.split(","), world_sizes=args.world_size, iters=iters, idle_s=idle_s)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=2)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)
    conform = sub.add_parser("conform", help="run the conformance suite against a backend and print the matrix")
    conform.add_argument("--backend", required=True, help="built-in name(s), 'module:attr', or entry point(s)")
    conform.add_argument("--world-size", help="comma-separated world sizes (default: HARNESS_WORLD_SIZE, else 1,2,4)")
    conform.add_argument("--start-method", help="comma-separated start methods (default spawn,fork)")
    conform.add_argument("--declare", help="clauses to treat as declared unsupported, e.g. C12,C22")
    conform.add_argument("--report-json", help="write the matrix as JSON to this path")
    conform.add_argument("--report-md", help="write the matrix as Markdown to this path")
    conform.add_argument("--timeout", help="seconds before a test is killed with its processes (default 300)")
    conform.add_argument("-k", help="only tests matching this pytest -k expression")
    conform.set_defaults(func=_conform)
    bench = sub.add_parser("bench", help="round-trip latency of an empty collective_rpc, with yardsticks")
    bench.add_argument("--backend", default="mp", help="backend(s) to measure (default mp)")
    bench.add_argument(
        "--world-size", type=_world_sizes, default="1,2,4", help="comma-separated world sizes (default 1,2,4)"
    )
    bench.add_argument("--iters", type=_positive_int, default=2000, help="timed calls per measurement (default 2000)")
    bench.add_argument("--quick", action="store_true", help="500 calls per measurement, 2 s idle check")
    bench.add_argument("--json", help="write the figures as JSON to this path")
    bench.set_defaults(func=_bench)
    args = parser.parse_args(argv)
    if args.command == "bench":
        _check_bench_args(bench, args)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
