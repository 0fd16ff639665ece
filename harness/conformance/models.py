"""Tiny tensor-parallel models and their dense references (C16).

Two models, both with random weights from a seed, so every rank builds the
same dense weights locally: nothing is downloaded.

**The MLP** (the perf tier's engine step). The dense model is
``y = W2 · gelu(W1 · x + b1) + b2``. Sharded over ``n`` ranks: W1 and b1 are
split by output rows (column-parallel: each rank computes its slice of the
hidden layer, no communication), W2 by input columns (row-parallel: each rank
computes a partial sum), and an ``all_reduce`` joins the partial sums before b2
is added once.

**The decoder** (the conformance suite's C16), sharded the way real models are
(Megatron-style, as vLLM does it)::

    ids ─► embedding (vocabulary-parallel: a rank looks up the ids in its rows,
    │      zeros elsewhere; all_reduce)
    ├─► per layer:  x += attention(rmsnorm(x))   QKV column-parallel by head,
    │                                            output row-parallel; all_reduce
    │               x += mlp(rmsnorm(x))         gate/up column-parallel,
    │                                            down row-parallel; all_reduce
    └─► rmsnorm ─► logits (vocabulary-parallel head; all_gather, in rank order)

Query heads split evenly across ranks. Grouped-query attention has fewer KV
heads than query heads; where they are fewer than the ranks too, each KV head
is replicated on the ranks whose query heads read it (``kv_heads_of_rank``).
Every hidden state after an all_reduce is the full one on every rank, so each
rank's per-layer outputs can be compared with the dense model's.

**The decoder in stages** (pipeline parallelism, ``Parallelism``): ``tp * pp``
ranks, rank = stage * tp + tp rank, as vLLM lays them out. Each stage holds an
even share of the layers, each TP-sharded over its stage's ranks as above (the
collectives on the stage's own group)::

    stage 0: ids ─► embedding ─► its layers ─┐ send to the same TP rank
    stage 1:              recv ◄─────────────┘ ─► its layers ─┐ of the next stage
    …                                                          │
    last:                 recv ◄───────────────────────────────┘ ─► its layers
                          ─► rmsnorm ─► logits (all_gather on the stage's group)

A send does not wait for its receiver, so stage 0 can take step t+1 while a
later stage still runs step t.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "TOLERANCES",
    "Communicator",
    "DecoderShape",
    "Link",
    "Parallelism",
    "decoder_prompt",
    "decoder_weights",
    "dense_decoder",
    "dense_forward",
    "greedy_decode",
    "kv_heads_of_rank",
    "layer_mismatches",
    "make_weights",
    "pipelined_decoder",
    "point_to_point",
    "sharded_decoder",
    "sharded_forward",
    "stage_collectives",
]

#: dtype name -> (rtol, atol) for comparing sharded with dense output. bfloat16
#: keeps 8 significant bits (unit roundoff 2**-8, 0.4 %); a sharded layer rounds
#: each rank's partial sum to bfloat16 before the all_reduce adds them, where the
#: dense one rounds the whole sum once, and the decoder's residual stream carries
#: each layer's difference into the next. The bound allows about 16 such
#: roundings (6 %) of a value near 1: the decoder's 2 layers round 2 partial sums
#: each, the embedding and the logits one more, on up to 8 ranks.
TOLERANCES = {"float32": (1e-5, 1e-5), "float64": (1e-10, 1e-10), "bfloat16": (16 * 2**-8, 16 * 2**-8)}


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


# ---- the decoder -----------------------------------------------------------------


@dataclass(frozen=True)
class DecoderShape:
    """The decoder's sizes. ``for_world_size`` picks ones every rank count divides."""

    vocab: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    layers: int = 2

    @classmethod
    def for_world_size(cls, world_size: int) -> DecoderShape:
        """Eight query heads and two KV heads where the rank count divides 8 (at 4
        and 8 ranks the KV heads are fewer than the ranks, and replicated); for
        other counts, 4 query heads per rank and one KV head (replicated on all)."""
        if world_size < 1:
            raise ValueError(f"world size {world_size} is not a positive rank count")
        heads, kv_heads = (8, 2) if 8 % world_size == 0 else (4 * world_size, 1)
        return cls(vocab=64 * heads, hidden=64, heads=heads, kv_heads=kv_heads, head_dim=16, intermediate=32 * heads)

    @classmethod
    def for_pipeline(cls, par: Parallelism) -> DecoderShape:
        """The shape ``for_world_size`` gives a stage's ``tp`` ranks, with two
        layers per stage (a boundary a layer off shows in every stage)."""
        from dataclasses import replace

        return replace(cls.for_world_size(par.tp), layers=2 * par.pp)

    def check(self, world_size: int) -> None:
        """Raises ValueError naming the size that ``world_size`` ranks cannot split."""
        for name in ("vocab", "heads", "intermediate"):
            if getattr(self, name) % world_size:
                raise ValueError(f"decoder {name} {getattr(self, name)} is not divisible by world size {world_size}")
        if self.heads % self.kv_heads:
            raise ValueError(f"decoder heads {self.heads} are not a multiple of kv_heads {self.kv_heads}")
        if self.kv_heads % world_size and world_size % self.kv_heads:
            raise ValueError(
                f"decoder kv_heads {self.kv_heads} neither divide nor are divided by world size {world_size}"
            )


class Communicator(Protocol):
    """The two collectives the sharded decoder needs (torch.distributed's by default)."""

    def all_reduce(self, t: Any) -> Any: ...  # sums across ranks, returns the sum

    def all_gather(self, t: Any) -> list[Any]: ...  # every rank's tensor, in rank order


class _Distributed:
    """torch.distributed's collectives on ``group`` (the default process group where None)."""

    def __init__(self, group: Any = None) -> None:
        self.group = group

    def all_reduce(self, t: Any) -> Any:
        import torch.distributed as dist

        dist.all_reduce(t, group=self.group)
        return t

    def all_gather(self, t: Any) -> list[Any]:
        import torch
        import torch.distributed as dist

        parts = [torch.empty_like(t) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(parts, t.contiguous(), group=self.group)
        return parts


class _Solo:
    """The collectives of a group of one rank (a stage of tp=1): nothing to join."""

    def all_reduce(self, t: Any) -> Any:
        return t

    def all_gather(self, t: Any) -> list[Any]:
        return [t]


def stage_collectives(par: Parallelism, rank: int) -> Communicator:
    """The collectives of ``rank``'s stage, on a group of its own. Every rank of the
    default group must call this together: each group is made by all of them."""
    import torch.distributed as dist

    if par.tp == 1:
        return _Solo()
    mine = None
    for stage in range(par.pp):
        group = dist.new_group(list(par.stage_ranks(stage)))
        if stage == par.stage_of(rank):
            mine = group
    return _Distributed(mine)


class _PointToPoint:
    """Sends and receives on the default group. A send returns at once; the
    tensor is kept until its send completes, and ``flush`` waits for them all."""

    def __init__(self) -> None:
        self.pending: list[tuple[Any, Any]] = []

    def send(self, t: Any, dst: int) -> None:
        import torch.distributed as dist

        self.pending = [(work, kept) for work, kept in self.pending if not work.is_completed()]
        t = t.contiguous()
        self.pending.append((dist.isend(t, dst), t))

    def recv(self, like: Any, src: int) -> Any:
        import torch.distributed as dist

        dist.recv(like, src)
        return like

    def flush(self) -> None:
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()


def point_to_point() -> _PointToPoint:
    """Send and receive between ranks of the default group, for pipeline stages."""
    return _PointToPoint()


class Link(Protocol):
    """Point-to-point between two ranks of the default group (pipeline stages)."""

    def send(self, t: Any, dst: int) -> None: ...  # returns without waiting for the receiver

    def recv(self, like: Any, src: int) -> Any: ...  # a tensor of ``like``'s shape and dtype, from src


@dataclass(frozen=True)
class Parallelism:
    """``tp`` ranks per stage, ``pp`` stages: rank = stage * tp + tp rank (vLLM's layout)."""

    tp: int
    pp: int

    def __post_init__(self) -> None:
        if self.tp < 1 or self.pp < 1:
            raise ValueError(f"tp={self.tp}, pp={self.pp}: both must be positive")

    def __str__(self) -> str:
        return f"tp{self.tp}xpp{self.pp}"

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    @property
    def output_rank(self) -> int:
        """The rank whose reply a step is narrowed to: the last stage's first rank."""
        return (self.pp - 1) * self.tp

    def stage_of(self, rank: int) -> int:
        return rank // self.tp

    def tp_rank_of(self, rank: int) -> int:
        return rank % self.tp

    def stage_ranks(self, stage: int) -> range:
        return range(stage * self.tp, (stage + 1) * self.tp)

    def layers_of(self, stage: int, layers: int) -> range:
        """The stage's even share of ``layers`` (a whole number of them per stage)."""
        if layers % self.pp:
            raise ValueError(f"{layers} layers do not split evenly into {self.pp} stages")
        per = layers // self.pp
        return range(stage * per, (stage + 1) * per)

    @classmethod
    def pipelines_of(cls, world_size: int) -> list[Parallelism]:
        """Every split of ``world_size`` ranks with two or more stages, most TP first
        (ws2: 1x2; ws4: 2x2, 1x4)."""
        return [cls(world_size // pp, pp) for pp in range(2, world_size + 1) if world_size % pp == 0]


def decoder_weights(seed: int, shape: DecoderShape, dtype: str = "float32") -> dict[str, Any]:
    """The dense model's weights, on the CPU; the same on every process for a seed."""
    import torch

    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)

    def randn(*size: int, scale: float = 1.0) -> Any:
        return (torch.randn(*size, generator=g, dtype=torch.float64) * scale).to(dt)

    h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    w = {
        "embedding": randn(shape.vocab, h),
        "norm": 1 + randn(h, scale=0.1),
        "lm_head": randn(shape.vocab, h, scale=h**-0.5),
    }
    for i in range(shape.layers):
        p = f"layers.{i}."
        w[p + "attention_norm"] = 1 + randn(h, scale=0.1)
        w[p + "wq"] = randn(q, h, scale=h**-0.5)
        w[p + "wk"] = randn(kv, h, scale=h**-0.5)
        w[p + "wv"] = randn(kv, h, scale=h**-0.5)
        w[p + "wo"] = randn(h, q, scale=q**-0.5)
        w[p + "mlp_norm"] = 1 + randn(h, scale=0.1)
        w[p + "gate"] = randn(shape.intermediate, h, scale=h**-0.5)
        w[p + "up"] = randn(shape.intermediate, h, scale=h**-0.5)
        w[p + "down"] = randn(h, shape.intermediate, scale=shape.intermediate**-0.5)
    return w


def decoder_prompt(seed: int, shape: DecoderShape, length: int = 8) -> list[int]:
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    return [int(i) for i in torch.randint(0, shape.vocab, (length,), generator=g)]


def kv_heads_of_rank(rank: int, world_size: int, kv_heads: int) -> range:
    """The KV heads ``rank`` holds: an even share where they are at least as many
    as the ranks, else the one its query heads read (replicated on
    ``world_size // kv_heads`` neighbouring ranks)."""
    if kv_heads >= world_size:
        per = kv_heads // world_size
        return range(rank * per, (rank + 1) * per)
    first = rank // (world_size // kv_heads)
    return range(first, first + 1)


def _rms_norm(x: Any, weight: Any) -> Any:
    import torch

    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + 1e-6)).to(x.dtype) * weight


def _rope(x: Any) -> Any:
    """Rotary position embedding on ``x`` of shape [tokens, heads, head_dim]."""
    import torch

    t, _, d = x.shape
    inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    ang = torch.arange(t, dtype=torch.float64, device=x.device)[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :].to(x.dtype), ang.sin()[:, None, :].to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def _attend(q: Any, k: Any, v: Any, group: int) -> Any:
    """Causal attention; q [T, Hq, D], k and v [T, Hkv, D], query head j reading KV head j // group."""
    import torch

    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,shd->hts", q, k) / q.shape[-1] ** 0.5
    t = q.shape[0]
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    probs = scores.masked_fill(mask, float("-inf")).float().softmax(-1).to(q.dtype)
    return torch.einsum("hts,shd->thd", probs, v).flatten(1)


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch's operations on one thread inside, the thread count restored after.

    The dense references run in the caller, beside the backend's ranks. Beside
    an idle ``ray`` graph's rank, which spins in Ray's read, torch's pool of a
    thread per core took 25 times as long on 2 cores (32 greedy steps: 3.28 s
    against 0.13 s); the models are tiny, and the check is the executor, not
    matmul speed. The ranks' probes run on one thread too."""
    import torch

    before = torch.get_num_threads()
    if before != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if before != 1:
            torch.set_num_threads(before)


def dense_decoder(w: dict[str, Any], shape: DecoderShape, ids: list[int]) -> dict[str, Any]:
    """The unsharded forward: the hidden state after each stage, and the logits
    (on one torch thread: :func:`one_torch_thread`)."""
    with one_torch_thread():
        return _dense_decoder(w, shape, ids)


def _dense_decoder(w: dict[str, Any], shape: DecoderShape, ids: list[int]) -> dict[str, Any]:
    import torch.nn.functional as F

    out: dict[str, Any] = {}
    x = w["embedding"][list(ids)]
    out["embedding"] = x
    d, t = shape.head_dim, len(ids)
    for i in range(shape.layers):
        p = f"layers.{i}."
        h = _rms_norm(x, w[p + "attention_norm"])
        q = _rope((h @ w[p + "wq"].T).view(t, shape.heads, d))
        k = _rope((h @ w[p + "wk"].T).view(t, shape.kv_heads, d))
        v = (h @ w[p + "wv"].T).view(t, shape.kv_heads, d)
        x = x + _attend(q, k, v, shape.heads // shape.kv_heads) @ w[p + "wo"].T
        out[p + "attention"] = x
        h = _rms_norm(x, w[p + "mlp_norm"])
        x = x + (F.silu(h @ w[p + "gate"].T) * (h @ w[p + "up"].T)) @ w[p + "down"].T
        out[p + "mlp"] = x
    out["logits"] = _rms_norm(x, w["norm"]) @ w["lm_head"].T
    return out


def _embed(w: dict[str, Any], shape: DecoderShape, ids: list[int], rank: int, n: int, comm: Communicator) -> Any:
    """The vocabulary-parallel embedding: this rank's rows, zeros elsewhere, summed."""
    import torch

    rows = shape.vocab // n
    first_id = rank * rows
    local = torch.tensor(ids, device=w["embedding"].device) - first_id
    mine = (local >= 0) & (local < rows)
    x = w["embedding"][first_id : first_id + rows][local.clamp(0, rows - 1)] * mine[:, None].to(w["embedding"].dtype)
    return comm.all_reduce(x)


def _layers(
    w: dict[str, Any],
    shape: DecoderShape,
    x: Any,
    layers: range,
    rank: int,
    n: int,
    comm: Communicator,
    out: dict[str, Any],
) -> Any:
    """``layers`` of the decoder on ``x``, TP-sharded over ``n`` ranks; each stage's
    hidden state into ``out``."""
    import torch.nn.functional as F

    d, t = shape.head_dim, x.shape[0]
    heads = shape.heads // n
    q_rows = slice(rank * heads * d, (rank + 1) * heads * d)
    kv = kv_heads_of_rank(rank, n, shape.kv_heads)
    kv_rows = slice(kv.start * d, kv.stop * d)
    group = heads // len(kv)  # the local query heads that read each local KV head
    ff = shape.intermediate // n
    ff_rows = slice(rank * ff, (rank + 1) * ff)
    for i in layers:
        p = f"layers.{i}."
        h = _rms_norm(x, w[p + "attention_norm"])
        q = _rope((h @ w[p + "wq"][q_rows].T).view(t, heads, d))
        k = _rope((h @ w[p + "wk"][kv_rows].T).view(t, len(kv), d))
        v = (h @ w[p + "wv"][kv_rows].T).view(t, len(kv), d)
        x = x + comm.all_reduce(_attend(q, k, v, group) @ w[p + "wo"][:, q_rows].T)
        out[p + "attention"] = x
        h = _rms_norm(x, w[p + "mlp_norm"])
        partial = (F.silu(h @ w[p + "gate"][ff_rows].T) * (h @ w[p + "up"][ff_rows].T)) @ w[p + "down"][:, ff_rows].T
        x = x + comm.all_reduce(partial)
        out[p + "mlp"] = x
    return x


def _head(w: dict[str, Any], shape: DecoderShape, x: Any, rank: int, n: int, comm: Communicator) -> Any:
    """The final norm and the vocabulary-parallel LM head, gathered in rank order."""
    import torch

    rows = shape.vocab // n
    logits = _rms_norm(x, w["norm"]) @ w["lm_head"][rank * rows : (rank + 1) * rows].T
    return torch.cat(comm.all_gather(logits), dim=-1)


def sharded_decoder(
    w: dict[str, Any],
    shape: DecoderShape,
    ids: list[int],
    rank: int,
    world_size: int,
    comm: Communicator | None = None,
) -> dict[str, Any]:
    """This rank's forward over its shards of ``w`` (the dense weights; a rank
    slices what it holds), joined by ``comm``; the same stages as ``dense_decoder``."""
    shape.check(world_size)
    comm = comm or _Distributed()
    out: dict[str, Any] = {}
    x = _embed(w, shape, ids, rank, world_size, comm)
    out["embedding"] = x
    x = _layers(w, shape, x, range(shape.layers), rank, world_size, comm, out)
    out["logits"] = _head(w, shape, x, rank, world_size, comm)
    return out


def pipelined_decoder(
    w: dict[str, Any],
    shape: DecoderShape,
    ids: list[int],
    rank: int,
    par: Parallelism,
    comm: Communicator,
    link: Link,
) -> dict[str, Any]:
    """This rank's part of one forward of the decoder in ``par.pp`` stages: its
    stage's layers, TP-sharded over the stage's ranks (``comm``, the stage's own
    group), the hidden state received from the previous stage (``link``) and
    sent on to the next; the embedding on the first stage, the logits on the
    last. Returns the stages it computed, named as ``dense_decoder`` names them."""
    shape.check(par.tp)
    stage, tp_rank = par.stage_of(rank), par.tp_rank_of(rank)
    out: dict[str, Any] = {}
    if stage == 0:
        x = _embed(w, shape, ids, tp_rank, par.tp, comm)
        out["embedding"] = x
    else:
        like = w["embedding"].new_empty((len(ids), shape.hidden))
        x = link.recv(like, rank - par.tp)
    x = _layers(w, shape, x, par.layers_of(stage, shape.layers), tp_rank, par.tp, comm, out)
    if stage < par.pp - 1:
        link.send(x, rank + par.tp)
    else:
        out["logits"] = _head(w, shape, x, tp_rank, par.tp, comm)
    return out


def greedy_decode(forward: Callable[[list[int]], Any], prompt: list[int], steps: int) -> list[int]:
    """``steps`` greedy tokens after ``prompt``; ``forward(ids)`` returns the logits
    of every position. The whole sequence is run again each step (no KV cache:
    the model is tiny, and the check is the sharding, not the cache)."""
    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(forward(ids)[-1].argmax()))
    return ids[len(prompt) :]


def layer_mismatches(
    got: list[dict[str, Any]], want: dict[str, Any], dtype: str
) -> list[tuple[int, str, float, tuple[int, ...]]]:
    """(rank, stage, largest error, its index) for each stage of each rank whose
    output is outside ``dtype``'s tolerance of the dense one (or missing, or of
    another shape: error ``inf``), earliest stage first within a rank."""
    import torch

    rtol, atol = TOLERANCES[dtype]
    bad: list[tuple[int, str, float, tuple[int, ...]]] = []
    for rank, stages in enumerate(got):
        for name, ref in want.items():
            out = stages.get(name) if isinstance(stages, dict) else None
            if out is None or tuple(out.shape) != tuple(ref.shape):
                bad.append((rank, name, float("inf"), ()))
                continue
            a, b = out.detach().double().cpu(), ref.detach().double().cpu()
            err = (a - b).abs()
            excess = err - (atol + rtol * b.abs())
            if bool((excess > 0).any()) or not bool(torch.isfinite(a).all()):
                at = int(torch.nan_to_num(excess, nan=float("inf")).argmax())
                index = tuple(int(i) for i in torch.unravel_index(torch.tensor(at), err.shape))
                bad.append((rank, name, float(err.flatten()[at]), index))
    return bad
