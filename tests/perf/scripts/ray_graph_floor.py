"""What Ray's compiled graphs cost by themselves, beside the `ray-graph` backend's figure.

Run: ``python tests/perf/scripts/ray_graph_floor.py`` (needs Ray). Prints the median
round trip of a compiled graph of bare actors (one actor echoing its input;
two, each answering on its own output channel) and of plain actor calls, on a
local cluster of this machine: the floor under `ray-graph`'s per-call figure in
``harness bench --backend mp,ray,ray-graph`` (docs/perf.md, "`ray` against `mp`").
"""

from __future__ import annotations

import statistics
from typing import Any

from harness.perf.workloads import time_calls


class _Echo:
    def echo(self, value: Any) -> Any:
        return value


def _median_us(call: Any, iters: int = 1000, warmup: int = 50) -> float:
    return statistics.median(time_calls(call, iters, warmup)) * 1e6


def main() -> None:
    import ray
    from ray.dag import InputNode, MultiOutputNode

    ray.init(num_cpus=4, log_to_driver=False, configure_logging=False)
    try:
        echo = ray.remote(_Echo)
        a, b = echo.remote(), echo.remote()  # type: ignore[attr-defined]
        ray.get([a.echo.remote(0), b.echo.remote(0)])
        body = b"x" * 100
        with InputNode() as inp:
            one = a.echo.bind(inp)
        graph = one.experimental_compile()
        print(f"graph, 1 actor:  {_median_us(lambda: ray.get(graph.execute(body))):8.1f} us")
        graph.teardown()
        with InputNode() as inp:
            two = MultiOutputNode([a.echo.bind(inp), b.echo.bind(inp)])
        graph = two.experimental_compile()
        print(f"graph, 2 actors: {_median_us(lambda: ray.get(graph.execute(body))):8.1f} us")
        graph.teardown()
        plain = _median_us(lambda: ray.get([a.echo.remote(body), b.echo.remote(body)]), iters=300)
        print(f"plain calls, 2 actors: {plain:8.1f} us")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
