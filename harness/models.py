"""A tiny tensor-parallel MLP and its dense reference (C16).

The dense model is ``y = W2 · gelu(W1 · x + b1) + b2``. Sharded over ``n`` ranks:
W1 and b1 are split by output rows (column-parallel: each rank computes its
slice of the hidden layer, no communication), W2 by input columns
(row-parallel: each rank computes a partial sum), and an ``all_reduce`` joins
the partial sums before b2 is added once. Weights are random, from a seed, so
every rank builds the same dense weights locally: nothing is downloaded.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TOLERANCES", "dense_forward", "make_weights", "sharded_forward"]

#: dtype name -> (rtol, atol) for comparing sharded with dense output.
TOLERANCES = {"float32": (1e-5, 1e-5), "float64": (1e-10, 1e-10), "bfloat16": (5e-2, 5e-2)}


def make_weights(seed: int, d_in: int, d_hidden: int, d_out: int, dtype: str = "float32") -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    return {
        "w1": (torch.randn(d_hidden, d_in, generator=g) / d_in**0.5).to(dt),
        "b1": torch.randn(d_hidden, generator=g).to(dt),
        "w2": (torch.randn(d_out, d_hidden, generator=g) / d_hidden**0.5).to(dt),
        "b2": torch.randn(d_out, generator=g).to(dt),
        "x": torch.randn(8, d_in, generator=g).to(dt),
    }


def dense_forward(w: dict[str, Any]) -> Any:
    import torch.nn.functional as F

    h = F.gelu(w["x"] @ w["w1"].T + w["b1"])
    return h @ w["w2"].T + w["b2"]


def sharded_forward(w: dict[str, Any], rank: int, world_size: int, device: Any = "cpu") -> Any:
    """This rank's forward pass over its shards; every rank returns the full output."""
    import torch.distributed as dist
    import torch.nn.functional as F

    d_hidden = w["w1"].shape[0]
    if d_hidden % world_size:
        raise ValueError(f"hidden size {d_hidden} is not divisible by world size {world_size}")
    part = d_hidden // world_size
    rows = slice(rank * part, (rank + 1) * part)
    x = w["x"].to(device)
    h = F.gelu(x @ w["w1"][rows].to(device).T + w["b1"][rows].to(device))  # column-parallel
    y = h @ w["w2"][:, rows].to(device).T  # row-parallel: a partial sum
    dist.all_reduce(y)
    return y + w["b2"].to(device)
