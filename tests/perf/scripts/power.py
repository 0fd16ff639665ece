"""How often the A/B mode flags a slowdown: the figures of the perf tier's power.

    python tests/perf/scripts/power.py [--runs 20] [--world-size 1] [--delays 0.02,0.05,0.1] \
        [--rows self,seed,beside,delayed]

For each B side, ``--runs`` A/B runs of the simulated engine step (A: plain
``mp``, fork; world size 1 by default, as ``test_power.py``), and how many
flagged B slower, on the step's time, on the caller's CPU per step, and on
either (the default verdict of ``harness bench --compare``, each judged at
p < 0.005):

- ``mp`` against itself: the false-alarm rate;
- the seed's regression (``regressed:spinning_reply_thread``): the detection rate;
- the seed's regression beside the calls (``regressed:spinning_beside``: a
  thread polling from the executor's start to its shutdown): the detection
  rate of a cost that is not in any call;
- ``regressed:delayed`` slowed by each fraction of the step's median (measured
  first, in this run): the smallest slowdown the mode detects reliably.

Figures are for the machine that runs it, in one run; compare them as ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # `tests.perf.regressed` by name

from harness.perf.ab import run_ab
from harness.perf.runner import open_side, parse_side, run_rounds
from harness.perf.stats import SLOWER
from harness.perf.workloads import EngineStep

PLAIN = "mp@start_method=fork"
SIZES = {"rounds": 40, "reps": 25, "warmup": 10}  # as tests/perf/test_power.py


#: The metrics whose rates are printed: those the default verdict judges, the step and the caller's CPU per step.
METRICS = ("step", "caller CPU")


def _rate(b: str, runs: int, world_size: int) -> tuple[dict[str, int], dict[str, list[float]], int]:
    """How many of ``runs`` A/B runs flagged B slower on each metric, the ratios,
    and how many the default verdict flagged (either metric)."""
    flagged = dict.fromkeys(METRICS, 0)
    ratios: dict[str, list[float]] = {m: [] for m in METRICS}
    either = 0
    for _ in range(runs):
        r = run_ab(parse_side(PLAIN), parse_side(b), EngineStep, world_size, **SIZES)
        for metric in METRICS:
            flagged[metric] += r.verdicts[metric].decision == SLOWER
            ratios[metric].append(r.verdicts[metric].ratio)
        either += r.b_is_slower
    return flagged, ratios, either


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--rounds", type=int, default=SIZES["rounds"], help="rounds per A/B run")
    p.add_argument("--delays", default="0.02,0.05,0.1", help="fractions of the step's median")
    p.add_argument("--rows", default="self,seed,beside,delayed", help="which rows, of self, seed, beside, delayed")
    args = p.parse_args()
    ws, wanted = args.world_size, set(args.rows.split(","))
    SIZES["rounds"] = args.rounds
    with open_side(parse_side(PLAIN), ws) as ex:
        samples = run_rounds({"mp": ex}, EngineStep(), ws, rounds=4, reps=25, warmup=10)["mp"]
    step = statistics.median(samples["step"])
    print(f"engine-step ws={ws}, plain mp: median step {step * 1e3:.2f} ms; {args.runs} A/B runs per row, {SIZES}")
    rows = []
    if "self" in wanted:
        rows.append(("mp against itself", PLAIN))
    if "seed" in wanted:
        rows.append(("seed's regression", "tests.perf.regressed:spinning_reply_thread"))
    if "beside" in wanted:
        rows.append(("spinning beside calls", "tests.perf.regressed:spinning_beside"))
    for fraction in (float(f) for f in args.delays.split(",")) if "delayed" in wanted else ():
        delay = fraction * step
        rows.append((f"delayed +{fraction:.0%}", f"tests.perf.regressed:delayed@env.HARNESS_PERF_DELAY_S={delay:.6f}"))
    for label, spec in rows:
        b = spec if "start_method" in spec else spec + ("," if "@" in spec else "@") + "start_method=fork"
        t0 = time.monotonic()
        flagged, ratios, either = _rate(b, args.runs, ws)
        rates = "; ".join(
            f"{m} flagged slower in {flagged[m]:2d} of {args.runs}, median ratio {statistics.median(ratios[m]):.3f}"
            for m in METRICS
        )
        rates += f"; either (the verdict) in {either:2d} of {args.runs}"
        print(f"{label:22} {rates}; {(time.monotonic() - t0) / args.runs:.1f} s per A/B run", flush=True)


if __name__ == "__main__":
    main()
