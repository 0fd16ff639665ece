"""The soak: one executor, many plain calls, and what its processes hold as they go.

C10: an executor keeps nothing of a completed call. Over the soak the caller's
and each worker's memory (its own pages, USS), open descriptors and threads are sampled
every :data:`SAMPLE_EVERY` calls; after a warm-up (the first half, where
allocators and caches fill), the growth per 1,000 calls is the least-squares
slope of each. Growth beyond :data:`BOUNDS` is a finding::

    calls ──► executor ──► every 250 calls: caller and each rank (psutil) ──► samples
                                                                               │
                        growth per 1,000 calls after the warm-up ◄─────────────┘ ──► over its bound: C10

The soak's seconds are its least: a soak that has not made the calls it needs to
be judged (:func:`~harness.system.growth.enough_to_judge`) by then goes on, up to
:data:`EXTEND` times its seconds more (at least :data:`EXTEND_AT_LEAST_S`, both
stretched by the load), so a slow backend or a busy machine makes the soak longer,
not unjudged (CI's 2-core runner made 3,437 Ray calls in 10 s, 563 short).

The calls are checked as they return (the model's own judgement of each echo),
so a soak that goes wrong stops with that clause, not with figures.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import time
from typing import Any

from harness.chaos.model import HANG_S, Echo, Model, Violation
from harness.system.growth import SAMPLE_EVERY, Growth, enough_to_judge, growth_of, measure
from harness.system.load import load_scale

SIZES = (0, 100, 4096, 65536)
#: How long a soak short of the calls to be judged may go on past its seconds.
EXTEND = 3.0
EXTEND_AT_LEAST_S = 60.0


@dataclasses.dataclass
class SoakResult:
    calls: int = 0
    seconds: float = 0.0
    samples: list[tuple[int, dict[tuple[str, str], float]]] = dataclasses.field(default_factory=list)
    growth: list[Growth] = dataclasses.field(default_factory=list)
    judged: bool = False


def soak(executor: Any, pids: list[int | None], seconds: float, rng: random.Random, stats: Any) -> SoakResult:
    """Plain calls on ``executor`` for ``seconds`` (longer where that is too few to
    judge, see the module's docstring): blocking, narrowed and batches of
    non_block calls read in random order, each judged; RSS, descriptors and threads
    sampled. Raises :class:`Violation` on a wrong call or growth over its bound."""
    from harness.chaos.bounded import attempt
    from harness.conformance import probes

    world_size = len(pids)
    model = Model(world_size, stretched=stats.stretched)
    processes = {"caller": os.getpid()}
    processes.update({f"rank {r}": pid for r, pid in enumerate(pids) if pid is not None and pid != os.getpid()})
    result = SoakResult()
    start = time.monotonic()
    bound = HANG_S * load_scale()
    give_up = seconds + max(EXTEND * seconds, EXTEND_AT_LEAST_S) * load_scale()
    next_sample = 0
    seq = 0

    def call(echo: Echo, non_block: bool = False) -> Any:
        return executor.collective_rpc(
            probes.echo,
            args=(echo.token, echo.data),
            kwargs={"token": echo.token},
            unique_reply_rank=echo.narrowed,
            non_block=non_block,
        )

    while (elapsed := time.monotonic() - start) < seconds or (not enough_to_judge(result.calls) and elapsed < give_up):
        if result.calls >= next_sample:
            result.samples.append((result.calls, measure(processes)))
            next_sample += SAMPLE_EVERY
        kind = rng.random()
        if kind < 0.3:
            batch = []
            for _ in range(rng.randint(1, 8)):
                seq += 1
                echo = Echo(f"s{seq}", rng.choice(SIZES), rng.choice([None, *range(world_size)]))
                batch.append((echo, call(echo, non_block=True)))
            rng.shuffle(batch)
            for echo, future in batch:
                what = f"soak call {echo.token}: {echo.describe()}, read in random order"
                model.judge_echo(echo, attempt(future.result, bound, what), what)
            result.calls += len(batch)
        else:
            seq += 1
            echo = Echo(f"s{seq}", rng.choice(SIZES), rng.choice([None, None, *range(world_size)]))
            what = f"soak call {echo.token}: {echo.describe()}"
            model.judge_echo(echo, attempt(functools.partial(call, echo), bound, what), what)
            result.calls += 1
    result.samples.append((result.calls, measure(processes)))
    result.seconds = time.monotonic() - start
    stats.calls += result.calls
    result.growth = growth_of(result.samples)
    result.judged = enough_to_judge(result.calls)
    over = [g for g in result.growth if g.over]
    if result.judged and over:
        raise Violation(
            "C10",
            f"over {result.calls} calls, "
            + "; ".join(g.describe() for g in over)
            + ": an executor keeps nothing of a completed call",
        )
    return result
