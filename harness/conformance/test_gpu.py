"""The GPU tier: the device clauses again with ``device="cuda"`` on NCCL.

Each test needs as many GPUs as its world size (``@pytest.mark.harness_gpu``), and
skips with "needs N GPUs, found M" elsewhere (``--require-gpus N`` makes that a
failure on a runner that should have them). Workers start with spawn: a forked
child cannot use CUDA. The tests never initialise CUDA in their own process:
what the GPUs hold is read through NVML or nvidia-smi (``harness.system.gpus``).

- C14: ranks, and each rank on a GPU of its own whatever CUDA_VISIBLE_DEVICES says;
- C15, C17: collectives on NCCL, large payloads with CUDA workers;
- C16: the sharded decoder against the dense one (float32 with TF32 off, bf16), greedy tokens;
  the decoder in stages (send/recv on NCCL), stage by stage and with steps in flight;
- C15: send/recv between any two ranks on NCCL;
- C4, C5, C21: futures of calls with kernels still queued;
- C8, C9: a rank killed inside an NCCL all_reduce, or mid-call; then no process
  of the executor's holds a GPU and GPU memory is back where it was.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import ExecutorConfig
from harness.conformance import _work_in_flight, probes
from harness.conformance._checks import (
    bounded,
    error_of,
    expect_equal,
    not_applicable,
    one_future,
)
from harness.conformance._faults import (
    DEATH_BOUND_S,
    expect_failure,
    kill,
    kill_a_rank_inside_a_collective,
    left,
    victim,
)
from harness.conformance._pipeline_parallel import check_pipeline_stages, check_steps_in_flight
from harness.conformance._tensor_parallel import check_decoder_stages, check_greedy_tokens
from harness.conformance._workers import worker_pids
from harness.conformance.test_process_group import expected_collectives
from harness.system import gpus
from harness.verdicts import LEAK_CLAUSE, Prop

pytestmark = [pytest.mark.timeout(600), pytest.mark.harness_gpu]


def _cuda_config(world_size: int, start_method: str) -> ExecutorConfig:
    if start_method == "fork":
        not_applicable(f"CUDA workers cannot start with {start_method}: a forked child cannot use CUDA")
    return ExecutorConfig(world_size, device="cuda", dist_backend="nccl", start_method="spawn")


@pytest.fixture
def cuda_executor(backend: Any, world_size: int, start_method: str) -> Iterator[Any]:
    with backend.factory(_cuda_config(world_size, start_method)) as ex:
        yield ex


@contextlib.contextmanager
def _watched(backend: Any, world_size: int, start_method: str, gpus_freed: set[int]) -> Iterator[Any]:
    """A CUDA executor whose processes ``gpus_freed`` checks after the test (its
    workers, and every process this one started: a backend's helpers), shut down
    on leaving, within C9's bound."""
    import psutil

    ex = backend.factory(_cuda_config(world_size, start_method))
    try:
        gpus_freed.update(set(worker_pids(ex)) | {c.pid for c in psutil.Process().children(recursive=True)})
        yield ex
    finally:
        bounded(ex.shutdown, 30, "shutdown()")


@pytest.fixture
def gpus_freed(request: pytest.FixtureRequest) -> Iterator[set[int]]:
    """What the GPUs hold before the test; the test adds its executor's processes.
    After it (and its shutdown()), none of them may compute on a GPU and GPU memory
    must be back where it was: a C9 finding, reported under C9 with this test's
    name, whatever the test's own clause."""
    before = gpus.gpu_states()
    pids: set[int] = set()
    yield pids
    if not pids:
        return
    problems = gpus.release_problems(before, pids, timeout_s=DEATH_BOUND_S)
    if problems:
        request.node.user_properties.append((Prop.LEAK, LEAK_CLAUSE))
        pytest.fail(f"{DEATH_BOUND_S:g} s after shutdown(): " + "; ".join(problems), pytrace=False)


@pytest.mark.harness_clause("C14")
def test_c14_cuda_ranks_map_to_processes(cuda_executor: Any, world_size: int) -> None:
    info = cuda_executor.collective_rpc(probes.dist_info)
    expect_equal([i[1] for i in info], list(range(world_size)), "process-group rank per entry (nccl)")
    assert len({i[3] for i in info}) == world_size, f"got {info}, expected one process per rank"


@pytest.mark.harness_clause("C14")
@pytest.mark.parametrize("visible", ["as-given", "reversed"])
def test_c14_each_rank_computes_on_a_gpu_of_its_own_whatever_cuda_visible_devices_says(
    backend: Any, world_size: int, start_method: str, visible: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Asked of each rank (torch.cuda.current_device() and its UUID), never assumed from the rank.
    if visible == "reversed":
        found = gpus.gpu_states()
        if len(found) < 2:
            not_applicable(f"{len(found)} GPU(s) visible: there is no other order to list them in")
        given = os.environ.get("CUDA_VISIBLE_DEVICES")
        order = [v.strip() for v in given.split(",") if v.strip()] if given else [str(g.index) for g in found]
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(reversed(order)))
    with backend.factory(_cuda_config(world_size, start_method)) as ex:
        devices = bounded(lambda: ex.collective_rpc(probes.cuda_device), 120, "collective_rpc(cuda_device)")
    shared = gpus.device_sharing([tuple(d) for d in devices])
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    assert not shared, f"CUDA_VISIBLE_DEVICES={cvd!r}: " + "; ".join(shared) + ", expected one GPU per rank"


@pytest.mark.harness_clause("C15")
def test_c15_nccl_collectives_are_correct(cuda_executor: Any, world_size: int) -> None:
    got = cuda_executor.collective_rpc(probes.collectives, args=("cuda",))
    expect_equal(got, [expected_collectives(world_size)] * world_size, "collectives on cuda/nccl")


@pytest.mark.harness_clause("C15")
def test_c15_the_cuda_group_runs_on_the_configs_dist_backend(cuda_executor: Any, world_size: int) -> None:
    # On CPU only gloo exists: here a backend that always uses gloo shows.
    got = cuda_executor.collective_rpc(probes.dist_backend)
    for rank, name in enumerate(got):
        expect_equal(str(name).lower(), "nccl", f"rank {rank}: torch.distributed.get_backend(), dist_backend='nccl'")


@pytest.mark.harness_clause("C17")
def test_c17_large_payload_round_trips_with_cuda_workers(cuda_executor: Any, world_size: int) -> None:
    data = os.urandom(32 << 20)
    got = cuda_executor.collective_rpc(probes.payload, args=(data,))
    for r, (rank, length, back) in enumerate(got):
        assert rank == r and length == len(data) and back == data, f"entry {r}: the 32 MiB payload came back altered"


@pytest.mark.harness_clause("C16")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_c16_a_sharded_decoder_on_cuda_matches_the_dense_one_stage_by_stage(
    cuda_executor: Any, world_size: int, dtype: str, harness_seed: int
) -> None:
    # The dense reference runs here on the CPU; the ranks run with TF32 off, so
    # float32 is held to float32's tolerance.
    check_decoder_stages(cuda_executor, world_size, dtype, "cuda", harness_seed)


@pytest.mark.harness_clause("C16")
def test_c16_greedy_tokens_of_the_sharded_decoder_on_cuda_equal_the_dense_ones(
    cuda_executor: Any, world_size: int, harness_seed: int
) -> None:
    check_greedy_tokens(cuda_executor, world_size, "float32", "cuda", harness_seed)


@pytest.mark.harness_clause("C16")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_c16_a_pipelined_decoder_on_cuda_matches_the_dense_one_stage_by_stage(
    cuda_executor: Any, world_size: int, dtype: str, harness_seed: int
) -> None:
    if world_size < 2:
        not_applicable("one GPU makes no pipeline: pipeline parallelism needs two stages")
    check_pipeline_stages(cuda_executor, world_size, dtype, "cuda", harness_seed)


@pytest.mark.harness_clause("C16")
def test_c16_steps_in_flight_of_a_pipelined_decoder_on_cuda_resolve_in_order_to_their_own_logits(
    cuda_executor: Any, world_size: int, harness_seed: int
) -> None:
    if world_size < 2:
        not_applicable("one GPU makes no pipeline: pipeline parallelism needs two stages")
    check_steps_in_flight(cuda_executor, world_size, "float32", "cuda", harness_seed)


@pytest.mark.harness_clause("C15")
def test_c15_nccl_point_to_point_works_between_any_two_ranks(cuda_executor: Any, world_size: int) -> None:
    if world_size < 2:
        not_applicable("one GPU: there is no other rank to send to")
    got = cuda_executor.collective_rpc(probes.point_to_point, args=("cuda",))
    want = [
        [None if src == dst else [float(src), float(dst)] for src in range(world_size)] for dst in range(world_size)
    ]
    expect_equal(got, want, "what each rank received from each other rank over NCCL, [source, destination]")


@pytest.mark.harness_clause("C4")
def test_c4_the_future_of_a_call_with_cuda_kernels_queued_resolves_to_their_values(
    cuda_executor: Any, world_size: int
) -> None:
    _work_in_flight.check_one_future(cuda_executor, world_size, "cuda")


@pytest.mark.harness_clause("C5")
def test_c5_futures_of_calls_with_cuda_kernels_queued_complete_in_order_with_their_values(
    cuda_executor: Any, world_size: int
) -> None:
    _work_in_flight.check_order(cuda_executor, world_size, "cuda")


@pytest.mark.harness_clause("C21")
def test_c21_a_callback_added_while_cuda_kernels_run_sees_their_values(cuda_executor: Any, world_size: int) -> None:
    _work_in_flight.check_callback(cuda_executor, world_size, "cuda")


@pytest.mark.harness_exclusive  # GPU memory is compared with before: no other test may allocate meanwhile
@pytest.mark.harness_clause("C8")
def test_c8_a_rank_killed_inside_an_nccl_all_reduce_fails_the_call(
    backend: Any, world_size: int, start_method: str, tmp_path: Path, gpus_freed: set[int]
) -> None:
    _cuda_config(world_size, start_method)  # not applicable with fork, before anything starts
    if world_size < 2:
        not_applicable("one rank: there is no other rank to block in an all_reduce")
    with _watched(backend, world_size, start_method, gpus_freed) as ex:
        # NCCL's survivors stay blocked in the all_reduce: only the executor can end the call.
        kill_a_rank_inside_a_collective(ex, world_size, tmp_path, "error_out", "cuda")


@pytest.mark.harness_exclusive  # GPU memory is compared with before: no other test may allocate meanwhile
@pytest.mark.harness_clause("C8")
def test_c8_a_rank_killed_with_cuda_kernels_queued_fails_the_call(
    backend: Any, world_size: int, start_method: str, gpus_freed: set[int]
) -> None:
    with _watched(backend, world_size, start_method, gpus_freed) as ex:
        rank, pid = victim(ex)
        pending = one_future(
            ex.collective_rpc(probes.device_work, args=(0, 100_000, "cuda"), non_block=True), "non_block=True"
        )
        time.sleep(1.0)  # the kernels are queued and running
        died = kill(pid)
        what = f"the call with kernels queued when rank {rank} (pid {pid}) was killed"
        expect_failure(error_of(pending, left(died), f"{what}, due within {DEATH_BOUND_S:g} s"), what)


@pytest.mark.harness_exclusive  # GPU memory is compared with before: no other test may allocate meanwhile
@pytest.mark.harness_clause("C9")
def test_c9_shutdown_frees_every_gpu_the_executor_used(
    backend: Any, world_size: int, start_method: str, gpus_freed: set[int]
) -> None:
    with _watched(backend, world_size, start_method, gpus_freed) as ex:
        _work_in_flight.check_one_future(ex, world_size, "cuda")  # every rank has allocated and computed
