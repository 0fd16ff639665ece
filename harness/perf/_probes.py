"""What the perf workloads run on the workers: module-level callables, so any
backend can run them by reference (``collective_rpc(fn)``).

A worker keeps the model of the simulated engine step between calls, as an
engine keeps its weights: the step measures the forward and its all_reduce,
not building the weights.
"""

from __future__ import annotations

import time
from typing import Any

# The worker process's model, by key; one executor's workers are one process each.
_MODELS: dict[str, dict[str, Any]] = {}


def load_model(worker: Any, key: str, seed: int, dims: tuple[int, int, int], device: str) -> int:
    """Build this rank's copy of the tiny TP model's weights once; its rank.

    The rank computes on one thread, as an engine pins a rank's threads: ranks
    that each start a thread pool on a machine with few cores make every step
    wait on another's spinning threads, and the noise swamps the signal."""
    import torch

    torch.set_num_threads(1)
    from harness.conformance import models

    w = models.make_weights(seed, *dims)
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    _MODELS[key] = {name: t.to(dev) for name, t in w.items()}
    return int(worker.rank)


def model_step(worker: Any, key: str, world_size: int) -> float:
    """One forward of the sharded model (its all_reduce included); a checksum,
    so the step's result is used and small."""
    from harness.conformance import models

    w = _MODELS[key]
    out = models.sharded_forward(w, int(worker.rank), world_size, w["x"].device)
    return float(out[0, 0])


def drop_model(worker: Any, key: str) -> None:
    _MODELS.pop(key, None)


def cpu_seconds(worker: Any) -> float:
    """CPU time this worker's process has used, all its threads."""
    return time.process_time()


def noop(worker: Any) -> None:
    return None


def blob(worker: Any, data: bytes) -> int:
    """Receives a payload, returns its size: the request carries the bytes."""
    return len(data)
