"""C16's pipeline-parallel checks, shared by the simulated tier (gloo on the CPU)
and the GPU tier (NCCL): the decoder in stages of ``harness.conformance.models``,
run by the workers, against the dense one computed here.

Two checks, for every split of the world size into ``tp x pp`` with two or
more stages (``Parallelism.pipelines_of``):

- **stage by stage**: one blocking call; each rank returns the stages it
  computed, which must be exactly its stage's even share of the layers (the
  embedding on the first stage, the logits on the last), each equal to the
  dense model's within the dtype's tolerance.
- **steps in flight**, as vLLM's engine runs pipeline parallelism with async
  scheduling: ``pp`` request streams (at least two), each a greedy decode of
  ``STEPS`` steps, every step ``collective_rpc(pipeline_step, non_block=True,
  unique_reply_rank=<the last stage's first rank>)``; one step of every stream
  in flight, so ``pp`` steps are in flight and they belong to different
  requests. Each future must complete in submission order and resolve to the
  output rank's reply to its own step, logits within tolerance of the dense
  model's on the same tokens; in float32 and float64 each stream's tokens must
  be the dense model's greedy tokens.

A backend that fails a prerequisite (C2's narrowed reply, C4's one future,
C5's order of plain futures) reads "blocked by" that clause, found by a probe
here before the streams start.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from harness.conformance import models, probes
from harness.conformance._checks import blocked_by, bounded, one_future, result_of

#: Greedy steps per request stream.
STEPS = 16
#: How long one step may take to complete once it is the oldest in flight. A
#: step of this tiny model takes milliseconds; the bound is for a hang, not for speed.
STEP_BOUND_S = 60.0
#: How often the oldest step's future is looked at while later ones are watched.
_POLL_S = 0.002


def _replay(seed: int) -> str:
    return f"seed {seed}: replay with --harness-seed {seed}"


def expected_stages(par: models.Parallelism, layers: int, rank: int) -> list[str]:
    """The stages ``rank`` must compute: its stage's even share of the layers,
    with the embedding on the first stage and the logits on the last. Worked
    out here, not by the model, so that a model's own split is checked."""
    stage, per = rank // par.tp, layers // par.pp
    names = ["embedding"] if stage == 0 else []
    for i in range(stage * per, (stage + 1) * per):
        names += [f"layers.{i}.attention", f"layers.{i}.mlp"]
    return names + (["logits"] if stage == par.pp - 1 else [])


def check_pipeline_stages(executor: Any, world_size: int, dtype: str, device: str, seed: int) -> None:
    """For every split of ``world_size`` with two or more stages: each rank computes
    exactly its stage's part, equal to the dense model's within tolerance."""
    __tracebackhide__ = True
    for par in models.Parallelism.pipelines_of(world_size):
        shape = models.DecoderShape.for_pipeline(par)
        want = models.dense_decoder(
            models.decoder_weights(seed, shape, dtype), shape, models.decoder_prompt(seed, shape)
        )
        args = (seed, dtype, device, par.tp, par.pp)
        got = executor.collective_rpc(probes.pipeline_stages, args=args)
        executor.collective_rpc(probes.pipeline_release, args=args)
        if not isinstance(got, list) or len(got) != world_size:
            raise AssertionError(
                f"{par}: got {type(got).__name__} of {len(got) if isinstance(got, list) else '?'} entries, "
                f"expected one per rank [collective_rpc(pipeline_stages)]"
            )
        problems: list[str] = []
        for rank, stages in enumerate(got):
            where = f"rank {rank} (stage {rank // par.tp})"
            names = expected_stages(par, shape.layers, rank)
            held = sorted(stages) if isinstance(stages, dict) else []
            if sorted(names) != held:
                problems.append(f"{where} computed {held}, expected its stage's {names}")
                continue
            for _, name, err, index in models.layer_mismatches([stages], {n: want[n] for n in names}, dtype):
                problems.append(f"{where}, {name}: largest error {err:.3g} at index {index}")
                break
        if problems:
            rtol, atol = models.TOLERANCES[dtype]
            raise AssertionError(
                f"the decoder in stages ({par}, rank = stage x {par.tp} + tp rank, {shape.layers} layers) differs "
                f"from the dense one ({dtype}: rtol={rtol:g}, atol={atol:g}; {_replay(seed)}):\n  "
                + "\n  ".join(problems)
            )


@dataclass
class InFlight:
    """What a run of the streams saw: the most steps in flight at once, and the
    largest error of any step's logits against the dense model's."""

    most_in_flight: int = 0
    largest_error: float = 0.0
    steps: int = 0
    tokens: dict[int, list[int]] = field(default_factory=dict)


def _prerequisites(executor: Any, par: models.Parallelism) -> None:
    """Blocked by C2 where a narrowed call does not return the rank's reply alone,
    by C4 where non_block is not one future, by C5 where a later plain call's
    future completes before an earlier one's."""
    __tracebackhide__ = True
    out = par.output_rank
    got = bounded(lambda: executor.collective_rpc(probes.rank, unique_reply_rank=out), 60, "a narrowed call")
    if got != out:
        blocked_by("C2", f"collective_rpc(rank, unique_reply_rank={out}) returned {got!r}, not {out}")
    first = one_future(
        executor.collective_rpc(probes.sleep_on_rank_then, args=(0, 0.2, "first"), non_block=True),
        "collective_rpc(non_block=True)",
    )
    second = one_future(executor.collective_rpc(probes.rank, non_block=True), "collective_rpc(non_block=True)")
    result_of(second, 60, "a second non_block call")
    if not first.done():
        blocked_by("C5", "a non_block call's future completed while an earlier call's was still pending")
    result_of(first, 60, "a first non_block call")


def _oldest_completes_first(flight: deque[tuple[int, int, list[int], Any]], par: models.Parallelism) -> None:
    """Waits for the oldest step in flight, failing where a later one completes
    first. The wait is the oldest future's ``result()``, on a watchdog thread:
    SPEC does not promise that a future completes while nobody waits on it (a
    backend may read replies only inside ``result()``, on the caller's thread,
    as vLLM's does), only that futures complete in submission order."""
    __tracebackhide__ = True
    stream, step, _, future = flight[0]
    waiter = threading.Thread(target=_quietly, args=(future,), name="harness-watchdog: oldest step", daemon=True)
    waiter.start()
    deadline = time.monotonic() + STEP_BOUND_S
    while not future.done():
        early = [(s, t) for s, t, _, f in list(flight)[1:] if f.done()]
        if early and not future.done():
            raise AssertionError(
                f"{par}: the future of stream {early[0][0]} step {early[0][1]} completed before that of stream "
                f"{stream} step {step}, submitted earlier: futures must complete in submission order "
                f"(steps in flight: {[(s, t) for s, t, _, _ in flight]})"
            )
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{par}: the future of stream {stream} step {step} did not complete within {STEP_BOUND_S:g} s "
                f"of waiting on its result() (steps in flight: {[(s, t) for s, t, _, _ in flight]})"
            )
        waiter.join(_POLL_S)


def _quietly(future: Any) -> None:
    """``future.result()``, its outcome left to the future (the check reads it)."""
    with contextlib.suppress(BaseException):
        future.result()


def run_steps_in_flight(
    executor: Any, par: models.Parallelism, dtype: str, device: str, seed: int, steps: int = STEPS
) -> InFlight:
    """The streams of ``par``'s pipeline, each step checked as it completes (see the module)."""
    __tracebackhide__ = True
    _prerequisites(executor, par)
    shape = models.DecoderShape.for_pipeline(par)
    w = models.decoder_weights(seed, shape, dtype)
    prompts = [models.decoder_prompt(seed + 7 * stream, shape) for stream in range(max(2, par.pp))]
    ids = [list(p) for p in prompts]
    args = (seed, dtype, device, par.tp, par.pp)
    rtol, atol = models.TOLERANCES[dtype]
    seen = InFlight()
    flight: deque[tuple[int, int, list[int], Any]] = deque()

    def submit(stream: int, step: int) -> None:
        sent = list(ids[stream])
        future = executor.collective_rpc(
            probes.pipeline_step, args=(*args, stream, step, sent), non_block=True, unique_reply_rank=par.output_rank
        )
        flight.append((stream, step, sent, one_future(future, "collective_rpc(non_block=True, unique_reply_rank)")))
        seen.most_in_flight = max(seen.most_in_flight, len(flight))

    for stream in range(len(prompts)):
        submit(stream, 0)
    while flight:
        _oldest_completes_first(flight, par)
        stream, step, sent, future = flight.popleft()
        what = f"{par}, stream {stream}, step {step} ({dtype}, {_replay(seed)})"
        reply = result_of(future, STEP_BOUND_S, what)
        if not (isinstance(reply, tuple) and len(reply) == 4):
            raise AssertionError(
                f"{what}: the future resolved to {type(reply).__name__} {str(reply)[:200]}, expected the reply "
                f"of rank {par.output_rank} alone (unique_reply_rank: the last stage's first rank)"
            )
        rank, got_stream, got_step, logits = reply
        if rank != par.output_rank:
            raise AssertionError(
                f"{what}: the future resolved to rank {rank}'s reply (stage {rank // par.tp}), expected rank "
                f"{par.output_rank}'s (unique_reply_rank={par.output_rank}, the last stage's first rank)"
            )
        if (got_stream, got_step) != (stream, step):
            raise AssertionError(
                f"{what}: the future resolved to the reply of stream {got_stream}, step {got_step}: each future "
                f"must resolve to its own call's reply, in submission order"
            )
        ref = models.dense_decoder(w, shape, sent)["logits"]
        bad = models.layer_mismatches([{"logits": logits}], {"logits": ref}, dtype)
        if bad:
            _, _, err, index = bad[0]
            raise AssertionError(
                f"{what}: rank {rank} (the last stage, {par.pp - 1}): logits differ from the dense model's by "
                f"{err:.3g} at index {index} (rtol={rtol:g}, atol={atol:g})"
            )
        err = (logits.double() - ref.double()).abs().max()
        seen.largest_error = max(seen.largest_error, float(err))
        seen.steps += 1
        ids[stream].append(int(logits[-1].argmax()))
        if step + 1 < steps:
            submit(stream, step + 1)
    executor.collective_rpc(probes.pipeline_release, args=args)
    seen.tokens = {stream: ids[stream][len(prompts[stream]) :] for stream in range(len(prompts))}
    if dtype in ("float32", "float64"):
        for stream, prompt in enumerate(prompts):
            want = models.greedy_decode(lambda s: models.dense_decoder(w, shape, s)["logits"], prompt, steps)
            got = seen.tokens[stream]
            if got != want:
                step = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
                raise AssertionError(
                    f"{par}, stream {stream}: greedy tokens differ from the dense model's from step {step} of "
                    f"{steps} ({dtype}, {_replay(seed)}): got {got}, expected {want}"
                )
    return seen


def check_steps_in_flight(executor: Any, world_size: int, dtype: str, device: str, seed: int) -> None:
    """``run_steps_in_flight`` for every split of ``world_size`` with two or more stages."""
    __tracebackhide__ = True
    for par in models.Parallelism.pipelines_of(world_size):
        seen = run_steps_in_flight(executor, par, dtype, device, seed)
        if seen.most_in_flight < par.pp:
            raise AssertionError(f"{par}: at most {seen.most_in_flight} steps were in flight, expected {par.pp}")
