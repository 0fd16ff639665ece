"""C16's decoder checks, shared by the simulated tier (gloo on the CPU) and the
GPU tier (NCCL): the sharded decoder of ``harness.conformance.models`` run by the workers,
compared with the dense one computed here, stage by stage and by greedy tokens.

Weights and prompt come from the run's seed (``--harness-seed``), which every
failure names, so the same run replays.
"""

from __future__ import annotations

from typing import Any

from harness.conformance import models, probes

#: Greedy tokens compared per check.
GREEDY_STEPS = 32


def _replay(seed: int) -> str:
    return f"seed {seed}: replay with --harness-seed {seed}"


def check_decoder_stages(executor: Any, world_size: int, dtype: str, device: str, seed: int) -> None:
    """Every rank's output after each stage equals the dense model's within ``dtype``'s tolerance."""
    __tracebackhide__ = True
    shape = models.DecoderShape.for_world_size(world_size)
    got = executor.collective_rpc(probes.decoder_stages, args=(seed, dtype, device, world_size))
    want = models.dense_decoder(models.decoder_weights(seed, shape, dtype), shape, models.decoder_prompt(seed, shape))
    if not isinstance(got, list) or len(got) != world_size:
        raise AssertionError(
            f"got {type(got).__name__} of {len(got) if isinstance(got, list) else '?'} entries, "
            f"expected one per rank [collective_rpc(decoder_stages)]"
        )
    bad = models.layer_mismatches(got, want, dtype)
    if bad:
        rtol, atol = models.TOLERANCES[dtype]
        first: dict[int, tuple[str, float, tuple[int, ...]]] = {}
        for rank, stage, err, index in bad:
            first.setdefault(rank, (stage, err, index))
        lines = [
            f"rank {rank}, {stage}: largest error {err:.3g} at index {index}"
            if index
            else f"rank {rank}, {stage}: missing, or of another shape than {tuple(want[stage].shape)}"
            for rank, (stage, err, index) in sorted(first.items())
        ]
        raise AssertionError(
            f"the sharded decoder differs from the dense one beyond {dtype}'s tolerance (rtol={rtol:g}, "
            f"atol={atol:g}) at world size {world_size} ({_replay(seed)}); each rank's first wrong stage:\n  "
            + "\n  ".join(lines)
        )


def check_greedy_tokens(executor: Any, world_size: int, dtype: str, device: str, seed: int) -> None:
    """Every rank's greedy tokens equal the dense model's, for ``GREEDY_STEPS`` steps."""
    __tracebackhide__ = True
    shape = models.DecoderShape.for_world_size(world_size)
    w, prompt = models.decoder_weights(seed, shape, dtype), models.decoder_prompt(seed, shape)
    want = models.greedy_decode(lambda ids: models.dense_decoder(w, shape, ids)["logits"], prompt, GREEDY_STEPS)
    got = executor.collective_rpc(probes.decoder_greedy, args=(seed, dtype, device, world_size, GREEDY_STEPS))
    for rank, tokens in enumerate(got):
        if tokens != want:
            step = next(
                (i for i, (a, b) in enumerate(zip(tokens, want, strict=False)) if a != b), min(len(tokens), len(want))
            )
            raise AssertionError(
                f"rank {rank}: greedy tokens differ from the dense model's from step {step} of {GREEDY_STEPS} "
                f"({dtype}, world size {world_size}, {_replay(seed)}): got {tokens}, expected {want}"
            )
