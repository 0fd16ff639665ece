"""A/B of two commits of this repository: is a change to a built-in executor faster?

    python tests/perf/scripts/ab_commits.py OLD NEW [--backend mp] [--world-size 2]
                                            [--start-method spawn] [--rounds 10]

``harness bench --compare`` judges two backends in one process; it cannot hold
two versions of ``harness`` itself. This script checks both commits out into
temporary worktrees and, in each round, runs one fresh process per side (the
order alternating) that starts the backend's executor and times its empty
``collective_rpc`` (the median of 3,000 calls, after 300). The rounds' medians
are judged NEW against OLD with the same statistics as an A/B run
(``harness.perf.stats.compare``), and the exit status is 1 when NEW is slower.

A fresh process per round matters: one executor's placement on the cores
holds for its life, and some placements cost 50 % more (two worker processes'
address layouts against the caller's), so a round is one placement drawn.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

from harness.perf.stats import SLOWER, compare

ROOT = Path(__file__).resolve().parents[3]

# What `harness bench --backend` measures, with the tree's own harness.
_MEASURE = textwrap.dedent(
    """
    import sys
    import harness
    try:
        from harness.perf.bench import measure_backend
    except ImportError:  # a commit before the layout of docs/layout.md
        from harness.bench import measure_backend

    if __name__ == "__main__":
        backend, world_size, start_method, where = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
        if not harness.__file__.startswith(where):
            sys.exit(f"imported harness from {harness.__file__}, not from {where}")
        result = measure_backend(f"{backend}@start_method={start_method}", world_size, 3000, 300)
        print(result.median_us * 1e-6)
    """
)


@contextlib.contextmanager
def worktrees(*commits: str) -> Iterator[list[Path]]:
    """Each commit checked out in a worktree of its own, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="harness-ab-") as tmp:
        paths = []
        try:
            for i, commit in enumerate(commits):
                path = Path(tmp) / f"side{i}"
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), commit],
                    check=True,
                )
                paths.append(path)
            yield paths
        finally:
            for path in paths:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)


def measure(tree: Path, script: Path, backend: str, world_size: int, start_method: str) -> float:
    """One fresh process: the median empty call, in seconds, of ``tree``'s harness."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, str(script), backend, str(world_size), start_method, str(tree)],
        cwd=tempfile.gettempdir(),  # not this checkout: its harness would shadow the tree's
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"measuring {tree} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="the A side: a commit, branch or tag")
    parser.add_argument("new", help="the B side")
    parser.add_argument("--backend", default="mp")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--start-method", default="spawn")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    if args.rounds < 5:
        parser.error(f"--rounds must be at least 5 for a verdict, got {args.rounds}")
    medians: dict[str, list[float]] = {"old": [], "new": []}
    with worktrees(args.old, args.new) as (old, new), tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "measure.py"
        script.write_text(_MEASURE)
        trees = {"old": old, "new": new}
        for r in range(args.rounds):
            order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            for side in order:
                medians[side].append(measure(trees[side], script, args.backend, args.world_size, args.start_method))
            print(
                f"round {r + 1}/{args.rounds}: old {medians['old'][-1] * 1e6:.1f} us, "
                f"new {medians['new'][-1] * 1e6:.1f} us",
                flush=True,
            )
    verdict = compare(medians["old"], medians["new"], "latency", f"A side: {args.old}")
    print(
        f"{args.backend} ws={args.world_size} {args.start_method}, empty call: "
        f"{args.old} {statistics.median(medians['old']) * 1e6:.1f} us, "
        f"{args.new} {statistics.median(medians['new']) * 1e6:.1f} us"
    )
    print(f"B ({args.new}) against A ({args.old}): {verdict.decision}: {verdict.message}")
    return 1 if verdict.decision == SLOWER else 0


if __name__ == "__main__":
    sys.exit(main())
