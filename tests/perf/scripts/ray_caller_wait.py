"""What the `ray` and `ray-graph` backends' processes burn while they wait.

Run: ``python tests/perf/scripts/ray_caller_wait.py`` (needs Ray). On a local cluster
of this machine, with executors at world size 2, it prints:

- the caller's CPU over a call that sleeps 3 s in every rank, as % of one core
  (Ray's own channel read spins through such a wait; the executor's caller
  polls after a short spin), and the median and 90th percentile of an empty
  call, the figure that polling must not cost;
- how long CPU-bound work (one busy process per CPU) takes beside an idle
  executor of each kind, against the same work on a quiet machine: the idle
  ranks of a compiled graph spin on their input in Ray's own loop, and the
  rest of the machine pays for it;
- how long the caller's 32 greedy steps of C16's dense decoder take on
  torch's pool of a thread per CPU and on one thread, quiet and beside an
  idle graph at world size 1 (the suite's references run on one thread).

docs/perf.md, "`ray` against `mp`", quotes these figures.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from typing import Any

from harness.perf.workloads import time_calls

_BUSY_LOOPS = 30_000_000


def _busy(out: Any) -> None:
    started = time.monotonic()
    total = 0
    for i in range(_BUSY_LOOPS):
        total += i
    out.put(time.monotonic() - started)


def busy_work_s() -> float:
    """Seconds until one busy process per CPU has each done the same work."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_busy, args=(out,)) for _ in range(os.cpu_count() or 1)]
    for p in procs:
        p.start()
    took = max(out.get() for _ in procs)
    for p in procs:
        p.join()
    return float(took)


def dense_greedy_s(threads: int) -> float:
    """Seconds of 32 greedy steps of C16's dense decoder (ws 2's shape) in this
    process, on ``threads`` torch threads."""
    import torch

    from harness.conformance import models

    shape = models.DecoderShape.for_world_size(2)
    w, prompt = models.decoder_weights(0, shape, "float32"), models.decoder_prompt(0, shape)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        started = time.monotonic()
        # The reference without dense_decoder's one-thread guard, which this measures.
        models.greedy_decode(lambda ids: models._dense_decoder(w, shape, ids)["logits"], prompt, 32)
        return time.monotonic() - started
    finally:
        torch.set_num_threads(before)


def torch_pool_beside_idle_graph(create: Any, config: Any) -> None:
    from harness.conformance import probes

    pool = os.cpu_count() or 1
    quiet = {n: dense_greedy_s(n) for n in (pool, 1)}
    with create(config) as ex:
        ex.collective_rpc(probes.rank)
        beside = {n: dense_greedy_s(n) for n in (pool, 1)}
    for n in (pool, 1):
        print(
            f"caller's dense greedy decode, {n} torch thread(s): {quiet[n]:6.2f} s quiet, "
            f"{beside[n]:6.2f} s beside an idle ray graph at ws 1 ({beside[n] / quiet[n]:.1f}x)"
        )


def main() -> None:
    from harness.executors.ray import local_cluster

    with local_cluster(4) as env:
        os.environ.update(env)
        from harness import ExecutorConfig
        from harness.conformance import probes
        from harness.executors.ray import create, create_graph

        with create_graph(ExecutorConfig(2)) as ex:
            for _ in range(2):
                wall, cpu = time.monotonic(), time.process_time()
                ex.collective_rpc(probes.sleep, args=(3.0,))
                share = (time.process_time() - cpu) / (time.monotonic() - wall)
                print(f"caller's CPU over a 3 s call: {share:6.1%} of a core")
            times = time_calls(lambda: ex.collective_rpc(probes.rank), 2000, 200)
            deciles = statistics.quantiles(times, n=10)
            print(f"empty call: median {statistics.median(times) * 1e6:7.1f} us, p90 {deciles[8] * 1e6:7.1f} us")

        quiet = busy_work_s()
        print(f"busy work, one process per CPU, quiet machine: {quiet:6.2f} s")
        for name, factory in (("ray-graph", create_graph), ("ray", create)):
            with factory(ExecutorConfig(2)) as ex:
                ex.collective_rpc(probes.rank)
                beside = busy_work_s()
            print(f"the same beside an idle {name} executor (ws 2): {beside:6.2f} s ({beside / quiet:.1f}x)")
        again = busy_work_s()
        print(f"quiet machine again: {again:6.2f} s")
        torch_pool_beside_idle_graph(create_graph, ExecutorConfig(1))


if __name__ == "__main__":
    main()
