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
    size = 16 * MIB
    got = executor.collective_rpc(probes.make_payload, args=(size, 1234))
    for r, blob in enumerate(got):
        expected = random.Random(1234 + r).randbytes(size)
        assert blob == expected, f"rank {r}: the {size // MIB} MiB result came back altered"
