"""C17: payloads far larger than any internal buffer."""

from __future__ import annotations

import hashlib
import os
import random
from typing import Any

import pytest

from harness import probes

pytestmark = pytest.mark.timeout(300)

MIB = 1 << 20


@pytest.mark.clause("C17")
def test_c17_a_64_mib_argument_round_trips_intact(executor: Any, world_size: int) -> None:
    data = os.urandom(64 * MIB)
    rank, length, back = executor.collective_rpc(probes.payload, args=(data,), unique_reply_rank=world_size - 1)
    assert (rank, length) == (world_size - 1, len(data)), f"got rank {rank}, length {length}"
    assert hashlib.sha256(back).digest() == hashlib.sha256(data).digest(), "the 64 MiB payload came back altered"


@pytest.mark.clause("C17")
def test_c17_large_results_from_every_rank_arrive_intact(executor: Any, world_size: int) -> None:
    size = 16 * MIB
    got = executor.collective_rpc(probes.make_payload, args=(size, 1234))
    for r, blob in enumerate(got):
        expected = random.Random(1234 + r).randbytes(size)
        assert blob == expected, f"rank {r}: the {size // MIB} MiB result came back altered"
