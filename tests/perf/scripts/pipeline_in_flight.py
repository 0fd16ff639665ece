"""The figures of C16's pipeline check for one backend and split: the steps in
flight, and per dtype the largest error of any step's logits against the dense
model's, beside the dtype's tolerance.

    python tests/perf/scripts/pipeline_in_flight.py                      # mp, ws4, tp2xpp2, fork
    python tests/perf/scripts/pipeline_in_flight.py --backend ray --tp 1 --pp 4

Each dtype runs the check's streams (``harness.conformance._pipeline_parallel``:
max(2, pp) request streams of 16 greedy steps, one step of each in flight) on
one executor; the check's own assertions hold as in the suite, so a wrong
backend stops the script with the check's failure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

from harness import ExecutorConfig
from harness.backends import load_backend
from harness.conformance import models
from harness.conformance._pipeline_parallel import run_steps_in_flight


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="mp")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--pp", type=int, default=2)
    parser.add_argument("--start-method", default="fork")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    par = models.Parallelism(args.tp, args.pp)
    loaded = load_backend(args.backend)
    config = ExecutorConfig(world_size=par.world_size, start_method=args.start_method)
    print(f"{args.backend} ws{par.world_size} {par} ({args.start_method}), seed {args.seed}")
    print(f"{'dtype':<9} {'steps':>5} {'in flight':>9} {'largest error':>14} {'atol':>10} {'rtol':>10} {'seconds':>8}")
    with contextlib.ExitStack() as stack:
        if loaded.session is not None:  # a backend's shared resources (ray: its cluster)
            os.environ.update(stack.enter_context(loaded.session()))
        executor = stack.enter_context(loaded.factory(config))
        for dtype in ("float64", "float32", "bfloat16"):
            start = time.monotonic()
            seen = run_steps_in_flight(executor, par, dtype, "cpu", args.seed)
            rtol, atol = models.TOLERANCES[dtype]
            print(
                f"{dtype:<9} {seen.steps:>5} {seen.most_in_flight:>9} {seen.largest_error:>14.3g} "
                f"{atol:>10.3g} {rtol:>10.3g} {time.monotonic() - start:>8.2f}"
            )


if __name__ == "__main__":
    main()
