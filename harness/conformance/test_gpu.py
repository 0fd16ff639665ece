"""The GPU tier: the device clauses again with ``device="cuda"`` on NCCL.

Each test needs as many GPUs as its world size (``@pytest.mark.gpu``), and
skips with "needs N GPUs, found M" elsewhere. Workers start with spawn: a
forked child cannot use CUDA.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from harness import ExecutorConfig, probes
from harness.conformance._checks import expect_equal, not_applicable, on_rank
from harness.conformance.test_process_group import expected_collectives

pytestmark = [pytest.mark.timeout(600), pytest.mark.gpu]


@pytest.fixture
def cuda_executor(backend: Any, world_size: int, start_method: str) -> Iterator[Any]:
    if start_method == "fork":
        not_applicable(f"CUDA workers cannot start with {start_method}: a forked child cannot use CUDA")
    cfg = ExecutorConfig(world_size, device="cuda", dist_backend="nccl", start_method="spawn")
    with backend.factory(cfg) as ex:
        yield ex


@pytest.mark.clause("C14")
def test_c14_cuda_ranks_map_to_processes(cuda_executor: Any, world_size: int) -> None:
    info = cuda_executor.collective_rpc(probes.dist_info)
    expect_equal([i[1] for i in info], list(range(world_size)), "process-group rank per entry (nccl)")
    assert len({i[3] for i in info}) == world_size, f"got {info}, expected one process per rank"


@pytest.mark.clause("C15")
def test_c15_nccl_collectives_are_correct(cuda_executor: Any, world_size: int) -> None:
    got = cuda_executor.collective_rpc(probes.collectives, args=("cuda",))
    expect_equal(got, [expected_collectives(world_size)] * world_size, "collectives on cuda/nccl")


@pytest.mark.clause("C17")
def test_c17_large_payload_round_trips_with_cuda_workers(cuda_executor: Any, world_size: int) -> None:
    data = os.urandom(32 << 20)
    _, length, back = cuda_executor.collective_rpc(probes.payload, args=(data,), unique_reply_rank=0)
    assert length == len(data) and back == data, "the 32 MiB payload came back altered"


@pytest.mark.clause("C16")
def test_c16_tensor_parallel_model_on_cuda_matches_the_dense_one(cuda_executor: Any, world_size: int) -> None:
    import torch

    from harness import models

    dims = (32, 192, 24)
    got = cuda_executor.collective_rpc(probes.tensor_parallel_forward, args=(7, dims, "float32", "cuda", world_size))
    expected = models.dense_forward(models.make_weights(7, *dims))
    for rank, out in enumerate(got):
        # TF32 matmuls on the GPU: a looser bound than on the CPU.
        torch.testing.assert_close(out, expected, rtol=5e-3, atol=5e-3, msg=on_rank(rank))
