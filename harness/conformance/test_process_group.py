"""C14, C15, C16: ranks, processes, collectives across the workers, and a model sharded over them
(tensor parallelism, and pipeline parallelism with steps in flight)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.conformance import probes
from harness.conformance._checks import expect_equal, not_applicable
from harness.conformance._pipeline_parallel import check_pipeline_stages, check_steps_in_flight
from harness.conformance._tensor_parallel import check_decoder_stages, check_greedy_tokens

pytestmark = pytest.mark.timeout(300)


@pytest.mark.harness_clause("C14")
def test_c14_worker_rank_is_the_process_group_rank_one_process_per_rank(executor: Any, world_size: int) -> None:
    info = executor.collective_rpc(probes.dist_info)
    expect_equal([i[0] for i in info], list(range(world_size)), "worker.rank per entry")
    expect_equal([i[1] for i in info], list(range(world_size)), "torch.distributed.get_rank() per entry")
    expect_equal({i[2] for i in info}, {world_size}, "torch.distributed.get_world_size()")
    # On different machines two processes may have one pid: a process is its pid and PID namespace.
    processes = [tuple(p) for p in executor.collective_rpc(probes.process)]
    assert len(set(processes)) == world_size, f"got (pid, PID namespace) {processes}, expected one process per rank"


@pytest.mark.harness_clause("C14")
def test_c14_ranks_run_node_by_node_on_as_many_machines_as_nodes(
    executor: Any, world_size: int, executor_config: Any
) -> None:
    """nodes=k: world_size/k ranks on each of k machines, rank r on node
    r // (world_size/k); nodes=1: every rank on the caller's machine."""
    import socket

    hosts = executor.collective_rpc(probes.hostname)
    nodes = executor_config.nodes
    if nodes == 1:
        caller = socket.gethostname()
        elsewhere = {rank: host for rank, host in enumerate(hosts) if host != caller}
        assert not elsewhere, f"nodes=1, but these ranks run off the caller's machine {caller!r}: {elsewhere}"
        return
    per = world_size // nodes
    layout = [hosts[node * per : (node + 1) * per] for node in range(nodes)]
    mixed = {node: ranks for node, ranks in enumerate(layout) if len(set(ranks)) != 1}
    assert not mixed, (
        f"nodes={nodes}: ranks r of node r // {per} must share one machine; machines per node's ranks: {mixed} "
        f"(all ranks' machines: {hosts})"
    )
    machines = [ranks[0] for ranks in layout]
    assert len(set(machines)) == nodes, (
        f"nodes={nodes}: the ranks run on {len(set(machines))} machine(s), not {nodes}: "
        f"node by node {machines} (all ranks' machines: {hosts})"
    )


def expected_collectives(n: int) -> dict[str, Any]:
    total = float(n * (n + 1) // 2)
    return {
        "all_reduce": [total] * 4,
        "all_gather": [[float(r), float(r * r)] for r in range(n)],
        "broadcast": [0.0, 1.0, 2.0],
    }


@pytest.mark.harness_clause("C15")
def test_c15_collectives_are_correct(executor: Any, world_size: int, executor_config: Any) -> None:
    got = executor.collective_rpc(probes.collectives, args=(executor_config.device,))
    expect_equal(got, [expected_collectives(world_size)] * world_size, "all_reduce/all_gather/broadcast/barrier")


@pytest.mark.harness_clause("C15")
def test_c15_point_to_point_send_and_recv_work_between_any_two_ranks(
    executor: Any, world_size: int, executor_config: Any
) -> None:
    """Pipeline stages pass hidden states this way: each rank sends to every other."""
    if world_size < 2:
        not_applicable("one rank: there is no other rank to send to")
    got = executor.collective_rpc(probes.point_to_point, args=(executor_config.device,))
    want = [
        [None if src == dst else [float(src), float(dst)] for src in range(world_size)] for dst in range(world_size)
    ]
    expect_equal(got, want, "what each rank received from each other rank, [source, destination]")


@pytest.mark.harness_clause("C15")
def test_c15_the_process_group_runs_on_the_configs_dist_backend(
    executor: Any, world_size: int, executor_config: Any
) -> None:
    got = executor.collective_rpc(probes.dist_backend)
    for rank, name in enumerate(got):
        expect_equal(
            str(name).lower(),
            executor_config.dist_backend.lower(),
            f"rank {rank}: torch.distributed.get_backend(), config.dist_backend={executor_config.dist_backend!r}",
        )


@pytest.mark.harness_clause("C16")
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_c16_a_sharded_decoder_matches_the_dense_one_stage_by_stage(
    executor: Any, world_size: int, executor_config: Any, dtype: str, harness_seed: int
) -> None:
    # Vocabulary-parallel embedding and logits, attention split by heads (with KV
    # heads replicated where fewer than the ranks), MLP column- then row-parallel.
    check_decoder_stages(executor, world_size, dtype, executor_config.device, harness_seed)


@pytest.mark.harness_clause("C16")
def test_c16_greedy_tokens_of_the_sharded_decoder_equal_the_dense_ones(
    executor: Any, world_size: int, executor_config: Any, harness_seed: int
) -> None:
    check_greedy_tokens(executor, world_size, "float32", executor_config.device, harness_seed)


def _needs_two_stages(world_size: int) -> None:
    if world_size < 2:
        not_applicable("one rank makes no pipeline: pipeline parallelism needs two stages, so two ranks")


@pytest.mark.harness_clause("C16")
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_c16_a_pipelined_decoder_matches_the_dense_one_stage_by_stage(
    executor: Any, world_size: int, executor_config: Any, dtype: str, harness_seed: int
) -> None:
    """Every tp x pp split with two or more stages (ws2: 1x2; ws4: 2x2, 1x4): each
    rank computes its stage's layers, TP-sharded within the stage, the hidden
    state sent from each rank to the same TP rank of the next stage."""
    _needs_two_stages(world_size)
    check_pipeline_stages(executor, world_size, dtype, executor_config.device, harness_seed)


@pytest.mark.harness_clause("C16")
def test_c16_steps_in_flight_of_a_pipelined_decoder_resolve_in_order_to_their_own_logits(
    executor: Any, world_size: int, executor_config: Any, harness_seed: int
) -> None:
    """As vLLM's engine runs pipeline parallelism with async scheduling: as many
    narrowed non_block steps in flight as stages, each of another request; each
    future completes in submission order with its own step's logits, and every
    stream's greedy tokens are the dense model's."""
    _needs_two_stages(world_size)
    check_steps_in_flight(executor, world_size, "float32", executor_config.device, harness_seed)
