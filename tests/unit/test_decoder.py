"""The tiny decoder of ``harness.conformance.models`` and C16's decoder checks, without processes.

The ranks run as threads of this process, joined by a communicator that sums
and gathers their tensors at a barrier, so every world size runs in
milliseconds. The checks' own failures are proved here too: a model that drops
the KV-head replication, and ranks that take the wrong shards, fail with the
rank and the stage named.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from harness.conformance import _pipeline_parallel, _tensor_parallel, models, probes  # noqa: E402


class _Collectives:
    """torch.distributed's two collectives for ``n`` threads: each call meets the
    other ranks' calls at a barrier."""

    def __init__(self, n: int) -> None:
        self.barrier = threading.Barrier(n, timeout=30)
        self.slots: list[Any] = [None] * n
        self.rank = threading.local()

    def _exchange(self, t: Any) -> list[Any]:
        self.slots[self.rank.value] = t.clone()
        self.barrier.wait()
        parts = list(self.slots)
        self.barrier.wait()
        return parts

    def all_reduce(self, t: Any) -> Any:
        parts = self._exchange(t)
        total = parts[0].clone()
        for p in parts[1:]:
            total += p
        return total

    def all_gather(self, t: Any) -> list[Any]:
        return self._exchange(t)


class ThreadExecutor:
    """``collective_rpc`` over ``n`` threads that use ``_Collectives`` for the
    default process group; ``rank_of`` maps a thread's group rank to the
    ``worker.rank`` it is shown (a wrong layout when not the identity)."""

    def __init__(self, n: int, monkeypatch: pytest.MonkeyPatch, rank_of: Callable[[int], int] = lambda r: r) -> None:
        self.n, self.rank_of = n, rank_of
        self.comm = _Collectives(n)
        monkeypatch.setattr(models, "_Distributed", lambda: self.comm)

    def collective_rpc(self, fn: Callable[..., Any], args: tuple[Any, ...] = ()) -> list[Any]:
        results: list[Any] = [None] * self.n

        def run(rank: int) -> None:
            self.comm.rank.value = rank
            worker = type("Worker", (), {"rank": self.rank_of(rank)})()
            results[rank] = fn(worker, *args)

        threads = [threading.Thread(target=run, args=(r,)) for r in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return results


@pytest.fixture
def executor_of(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., ThreadExecutor]]:
    yield lambda n, **kw: ThreadExecutor(n, monkeypatch, **kw)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_the_sharded_decoder_matches_the_dense_one_at_every_stage(
    executor_of: Callable[..., ThreadExecutor], world_size: int, dtype: str
) -> None:
    _tensor_parallel.check_decoder_stages(executor_of(world_size), world_size, dtype, "cpu", seed=0)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_greedy_tokens_of_the_sharded_decoder_equal_the_dense_ones(
    executor_of: Callable[..., ThreadExecutor], world_size: int
) -> None:
    _tensor_parallel.check_greedy_tokens(executor_of(world_size), world_size, "float32", "cpu", seed=3)


def test_the_shapes_split_evenly_and_have_grouped_kv_heads_fewer_than_the_ranks_at_4_and_8() -> None:
    for n in (1, 2, 3, 4, 5, 6, 8):
        shape = models.DecoderShape.for_world_size(n)
        shape.check(n)
        assert shape.kv_heads < shape.heads, f"world size {n}: {shape} has no grouped-query attention"
    assert models.DecoderShape.for_world_size(4).kv_heads < 4
    assert models.DecoderShape.for_world_size(8).kv_heads < 8


def test_a_kv_head_fewer_than_the_ranks_is_replicated_on_the_ranks_whose_queries_read_it() -> None:
    assert [models.kv_heads_of_rank(r, 4, 2) for r in range(4)] == [range(0, 1), range(0, 1), range(1, 2), range(1, 2)]
    assert [models.kv_heads_of_rank(r, 2, 4) for r in range(2)] == [range(0, 2), range(2, 4)]
    assert [models.kv_heads_of_rank(r, 3, 1) for r in range(3)] == [range(0, 1)] * 3


def test_a_size_the_ranks_cannot_split_is_an_error_naming_it() -> None:
    shape = models.DecoderShape(vocab=100, hidden=64, heads=8, kv_heads=2, head_dim=16, intermediate=256)
    with pytest.raises(ValueError, match="decoder vocab 100 is not divisible by world size 8"):
        shape.check(8)
    with pytest.raises(ValueError, match="kv_heads 3 neither divide nor are divided by world size 2"):
        models.DecoderShape(vocab=64, hidden=64, heads=6, kv_heads=3, head_dim=16, intermediate=64).check(2)


def test_a_model_that_drops_the_kv_head_replication_fails_at_the_first_attention_with_the_ranks_named(
    executor_of: Callable[..., ThreadExecutor], monkeypatch: pytest.MonkeyPatch
) -> None:
    right = models.kv_heads_of_rank

    def round_robin(rank: int, world_size: int, kv_heads: int) -> range:
        # Where the KV heads are fewer than the ranks: rank r holds KV head r % kv_heads,
        # not the one its query heads read.
        return (
            range(rank % kv_heads, rank % kv_heads + 1) if kv_heads < world_size else right(rank, world_size, kv_heads)
        )

    monkeypatch.setattr(models, "kv_heads_of_rank", round_robin)
    with pytest.raises(AssertionError) as failure:
        _tensor_parallel.check_decoder_stages(executor_of(4), 4, "float32", "cpu", seed=0)
    text = str(failure.value)
    for rank in range(4):
        assert f"rank {rank}, layers.0.attention: largest error" in text, text
    assert "seed 0: replay with --harness-seed 0" in text


def test_workers_that_take_another_ranks_shards_fail_with_the_rank_and_stage_named(
    executor_of: Callable[..., ThreadExecutor],
) -> None:
    # worker.rank is the next group rank's: every shard is present once, so the
    # sums are right and only the gathered logits come out in the wrong order.
    ex = executor_of(2, rank_of=lambda r: (r + 1) % 2)
    with pytest.raises(AssertionError, match=r"rank 0, logits: largest error .* at index \("):
        _tensor_parallel.check_decoder_stages(ex, 2, "float32", "cpu", seed=0)
    with pytest.raises(AssertionError, match=r"rank 0: greedy tokens differ from the dense model's from step 0"):
        _tensor_parallel.check_greedy_tokens(ex, 2, "float32", "cpu", seed=0)


def test_a_missing_or_misshapen_stage_is_named() -> None:
    shape = models.DecoderShape.for_world_size(1)
    w = models.decoder_weights(0, shape)
    want = models.dense_decoder(w, shape, models.decoder_prompt(0, shape))
    got = dict(want)
    del got["layers.1.mlp"]
    got["logits"] = got["logits"][:, :3]
    bad = models.layer_mismatches([got], want, "float32")
    assert [(r, s) for r, s, _, _ in bad] == [(0, "layers.1.mlp"), (0, "logits")]
    assert all(err == float("inf") for _, _, err, _ in bad)


def test_a_nan_is_a_mismatch_even_where_the_tolerance_would_hide_it() -> None:
    shape = models.DecoderShape.for_world_size(1)
    want = models.dense_decoder(models.decoder_weights(0, shape), shape, models.decoder_prompt(0, shape))
    got = {k: v.clone() for k, v in want.items()}
    got["embedding"][2, 5] = float("nan")
    assert [(r, s, i) for r, s, _, i in models.layer_mismatches([got], want, "bfloat16")] == [(0, "embedding", (2, 5))]


# ---- the decoder in stages (pipeline parallelism) ----------------------------------


class _Group:
    """The collectives of one group of threads; ``member(i)`` is the i-th one's view."""

    def __init__(self, n: int) -> None:
        self.barrier = threading.Barrier(n, timeout=30)
        self.slots: list[Any] = [None] * n

    def exchange(self, i: int, t: Any) -> list[Any]:
        self.slots[i] = t.clone()
        self.barrier.wait()
        parts = list(self.slots)
        self.barrier.wait()
        return parts

    def member(self, i: int) -> Any:
        group = self

        class Member:
            def all_reduce(self, t: Any) -> Any:
                return _sum(group.exchange(i, t))

            def all_gather(self, t: Any) -> list[Any]:
                return group.exchange(i, t)

        return Member()


def _sum(parts: list[Any]) -> Any:
    total = parts[0].clone()
    for p in parts[1:]:
        total += p
    return total


class _Links:
    """Point-to-point between threads: a queue per (source, destination)."""

    def __init__(self) -> None:
        self.queues: dict[tuple[int, int], queue.Queue[Any]] = {}
        self.lock = threading.Lock()

    def _queue(self, src: int, dst: int) -> queue.Queue[Any]:
        with self.lock:
            return self.queues.setdefault((src, dst), queue.Queue())

    def end(self, rank: int) -> Any:
        links = self

        class End:
            pending: list[Any] = []

            def send(self, t: Any, dst: int) -> None:
                links._queue(rank, dst).put(t.clone())

            def recv(self, like: Any, src: int) -> Any:
                return links._queue(src, rank).get(timeout=30)

        return End()


class FifoThreads:
    """``collective_rpc`` over ``n`` threads that each run their calls in
    submission order, as worker processes do, so stages overlap; non_block gives
    one future, narrowed by unique_reply_rank. Pipeline stages get thread groups
    and links in place of torch.distributed's."""

    def __init__(self, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = n
        self.inboxes: list[queue.Queue[Any]] = [queue.Queue() for _ in range(n)]
        self.links = _Links()
        self.groups: dict[tuple[int, int], list[_Group]] = {}
        monkeypatch.setattr(probes, "_PIPELINES", {})
        monkeypatch.setattr(probes, "_one_thread", lambda: None)
        monkeypatch.setattr(models, "stage_collectives", self._stage_collectives)
        monkeypatch.setattr(models, "point_to_point", lambda: self.links.end(self._rank.value))
        self._rank = threading.local()
        self.threads = [threading.Thread(target=self._serve, args=(r,), daemon=True) for r in range(n)]
        for t in self.threads:
            t.start()

    def _stage_collectives(self, par: models.Parallelism, rank: int) -> Any:
        groups = self.groups.setdefault((par.tp, par.pp), [_Group(par.tp) for _ in range(par.pp)])
        return groups[par.stage_of(rank)].member(par.tp_rank_of(rank))

    def _serve(self, rank: int) -> None:
        self._rank.value = rank
        worker = type("Worker", (), {"rank": rank})()
        while True:
            fn, args, replies, done = self.inboxes[rank].get()
            if fn is None:
                return
            try:
                replies[rank] = (True, fn(worker, *args))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                replies[rank] = (False, exc)
            done()

    def collective_rpc(
        self,
        fn: Callable[..., Any],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: Any = None,
        non_block: bool = False,
        unique_reply_rank: int | None = None,
    ) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        replies: list[Any] = [None] * self.n
        left = [self.n]
        lock = threading.Lock()

        def done() -> None:
            with lock:
                left[0] -= 1
                if left[0]:
                    return
            failed = [r[1] for r in replies if not r[0]]
            if failed:
                future.set_exception(failed[0])
            else:
                values = [r[1] for r in replies]
                future.set_result(values if unique_reply_rank is None else values[unique_reply_rank])

        for inbox in self.inboxes:
            inbox.put((fn, args, replies, done))
        return future if non_block else future.result(60)

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put((None, (), None, None))


@pytest.fixture
def fifo_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], FifoThreads]]:
    made: list[FifoThreads] = []

    def make(n: int) -> FifoThreads:
        made.append(FifoThreads(n, monkeypatch))
        return made[-1]

    yield make
    for ex in made:
        ex.close()


def test_the_splits_of_a_world_size_have_two_or_more_stages_most_tp_first() -> None:
    assert [str(p) for p in models.Parallelism.pipelines_of(2)] == ["tp1xpp2"]
    assert [str(p) for p in models.Parallelism.pipelines_of(4)] == ["tp2xpp2", "tp1xpp4"]
    assert models.Parallelism.pipelines_of(1) == []
    par = models.Parallelism(2, 2)
    assert [par.stage_of(r) for r in range(4)] == [0, 0, 1, 1]
    assert [par.tp_rank_of(r) for r in range(4)] == [0, 1, 0, 1]
    assert par.output_rank == 2


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_the_decoder_in_stages_matches_the_dense_one_stage_by_stage(
    fifo_threads: Callable[[int], FifoThreads], world_size: int, dtype: str
) -> None:
    _pipeline_parallel.check_pipeline_stages(fifo_threads(world_size), world_size, dtype, "cpu", seed=0)


@pytest.mark.parametrize("world_size", [2, 4])
def test_steps_in_flight_of_the_decoder_in_stages_give_the_dense_models_tokens(
    fifo_threads: Callable[[int], FifoThreads], world_size: int
) -> None:
    for par in models.Parallelism.pipelines_of(world_size):
        seen = _pipeline_parallel.run_steps_in_flight(fifo_threads(world_size), par, "float32", "cpu", seed=0)
        assert seen.most_in_flight == max(2, par.pp)
        assert seen.steps == max(2, par.pp) * _pipeline_parallel.STEPS
        assert seen.largest_error <= models.TOLERANCES["float32"][1] * 100


def test_a_stage_boundary_off_by_one_layer_fails_naming_the_stage_and_its_layers(
    fifo_threads: Callable[[int], FifoThreads], monkeypatch: pytest.MonkeyPatch
) -> None:
    def one_late(self: models.Parallelism, stage: int, layers: int) -> range:
        # Stage 0 keeps one layer of stage 1's: every layer still runs once.
        per = layers // self.pp
        return range(0 if stage == 0 else stage * per + 1, (stage + 1) * per + (1 if stage == 0 else 0))

    monkeypatch.setattr(models.Parallelism, "layers_of", one_late)
    with pytest.raises(AssertionError) as failure:
        _pipeline_parallel.check_pipeline_stages(fifo_threads(2), 2, "float32", "cpu", seed=0)
    text = str(failure.value)
    assert "tp1xpp2" in text, text
    assert "rank 0 (stage 0) computed" in text and "layers.2.attention" in text, text
    assert "rank 1 (stage 1) computed" in text, text


def test_a_reply_of_the_wrong_rank_or_step_and_a_later_step_completing_first_are_named(
    fifo_threads: Callable[[int], FifoThreads], monkeypatch: pytest.MonkeyPatch
) -> None:
    par = models.Parallelism(1, 2)
    ex = fifo_threads(2)
    narrowed = ex.collective_rpc

    def rank_zeros(fn: Any, timeout: Any = None, args: Any = (), kwargs: Any = None, non_block: bool = False,
                   unique_reply_rank: Any = None) -> Any:  # fmt: skip
        wrong = 0 if non_block and unique_reply_rank is not None else unique_reply_rank
        return narrowed(fn, timeout, args, kwargs, non_block, wrong)

    monkeypatch.setattr(ex, "collective_rpc", rank_zeros)
    with pytest.raises(AssertionError, match=r"tp1xpp2, stream 0, step 0 .*resolved to rank 0's reply \(stage 0\)"):
        _pipeline_parallel.run_steps_in_flight(ex, par, "float32", "cpu", seed=0)

    ex = fifo_threads(2)
    inner = ex.collective_rpc
    held: list[concurrent.futures.Future[Any]] = []

    def swapped(fn: Any, timeout: Any = None, args: Any = (), kwargs: Any = None, non_block: bool = False,
                unique_reply_rank: Any = None) -> Any:  # fmt: skip
        out = inner(fn, timeout, args, kwargs, non_block, unique_reply_rank)
        if not (non_block and unique_reply_rank is not None):
            return out
        mine: concurrent.futures.Future[Any] = concurrent.futures.Future()
        out.result(60)
        if held:  # the earlier step's future completes after this one's
            mine.set_result(out.result())
            earlier = held.pop()
            threading.Timer(0.5, earlier.set_result, args=(earlier.reply,)).start()  # type: ignore[attr-defined]
        else:
            mine.reply = out.result()  # type: ignore[attr-defined]
            held.append(mine)
        return mine

    monkeypatch.setattr(ex, "collective_rpc", swapped)
    with pytest.raises(AssertionError, match=r"the future of stream 1 step 0 completed before that of stream 0 step 0"):
        _pipeline_parallel.run_steps_in_flight(ex, par, "float32", "cpu", seed=0)
