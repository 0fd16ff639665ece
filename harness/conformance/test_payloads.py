"""C17: payloads far larger than any internal buffer."""

from __future__ import annotations

import hashlib
import os
import random
from typing import Any

import pytest

from harness.conformance import probes

pytestmark = pytest.mark.timeout(300)

MIB = 1 << 20


@pytest.mark.harness_clause("C17")
def test_c17_a_64_mib_argument_reaches_every_rank_intact(executor: Any, world_size: int) -> None:
    # Each rank answers with a digest, not the bytes: the results' way back is the
    # next test's, and narrowing the reply to one rank would lean on C2.
    data = os.urandom(64 * MIB)
    want = (len(data), hashlib.sha256(data).hexdigest())
    got = executor.collective_rpc(probes.payload_digest, args=(data,))
    for r, (rank, length, digest) in enumerate(got):
        assert rank == r and (length, digest) == want, (
            f"entry {r}: rank {rank} got {length} bytes with sha256 {digest[:16]}..., "
            f"expected {want[0]} bytes with sha256 {want[1][:16]}...: the 64 MiB argument arrived altered"
        )


@pytest.mark.harness_clause("C17")
def test_c17_large_results_from_every_rank_arrive_intact(executor: Any, world_size: int) -> None:
    # As large as the argument of the test above ("arguments and results"), and
    # every byte compared: a fault past the first tens of MiB shows too.
    size = 64 * MIB
    got = executor.collective_rpc(probes.make_payload, args=(size, 1234))
    assert isinstance(got, list) and len(got) == world_size, f"got {type(got).__name__}, expected {world_size} results"
    for r, blob in enumerate(got):
        expected = random.Random(1234 + r).randbytes(size)
        if blob != expected:
            how = (
                f"{len(blob)} bytes, the first difference at byte {_first_difference(blob, expected)}"
                if isinstance(blob, bytes)
                else f"a {type(blob).__name__}"
            )
            raise AssertionError(f"rank {r}: the {size // MIB} MiB result came back altered ({how})")


def _first_difference(got: bytes, expected: bytes) -> int:
    """The offset of the first byte where ``got`` differs from ``expected``."""
    lo, hi = 0, min(len(got), len(expected))
    while lo < hi:  # halving on slices: C-speed comparisons, not a loop per byte
        mid = (lo + hi) // 2
        if got[lo : mid + 1] == expected[lo : mid + 1]:
            lo = mid + 1
        else:
            hi = mid
    return lo
