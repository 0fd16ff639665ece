"""How often the quick A/B forms of ``test_power.py`` decide what they should:
runs one of them ``--runs`` times and prints each run's ratio and decision.

    .venv/bin/python -m tests.perf.scripts.quick_rates --side mp --runs 20
    .venv/bin/python -m tests.perf.scripts.quick_rates --side regressed --runs 10 --rounds 12

``--side``: ``mp`` (against itself), ``regressed`` (the spinning reply thread)
or ``delayed`` (every call 1 ms late). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import time

from tests.perf.test_power import PLAIN, QUICK, REGRESSED, SLOWED, ab

SIDES = {"mp": PLAIN, "regressed": REGRESSED, "delayed": SLOWED}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=sorted(SIDES), default="mp")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=QUICK["rounds"])
    args = parser.parse_args()
    sizes = {**QUICK, "rounds": args.rounds}
    decisions: dict[str, int] = {}
    start = time.monotonic()
    for i in range(args.runs):
        result = ab(SIDES[args.side], sizes)
        # As `harness bench --compare` decides: slower when any judged metric is.
        decision = "slower" if result.b_is_slower else "not slower"
        decisions[decision] = decisions.get(decision, 0) + 1
        ratios = ", ".join(f"{m} {result.verdicts[m].ratio:.3f} {result.verdicts[m].decision}" for m in result.gate)
        print(f"run {i + 1}: {ratios}: {decision}", flush=True)
    took = (time.monotonic() - start) / max(1, args.runs)
    print(f"{args.side} against mp, {args.rounds} rounds: {decisions} in {args.runs} runs, {took:.1f} s a run")


if __name__ == "__main__":
    main()
