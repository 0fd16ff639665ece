"""C14, C15, C16: ranks, processes, collectives across the workers, and a model sharded over them."""

from __future__ import annotations

from typing import Any

import pytest

from harness.conformance import probes
from harness.conformance._checks import expect_equal
from harness.conformance._tensor_parallel import check_decoder_stages, check_greedy_tokens

pytestmark = pytest.mark.timeout(300)


@pytest.mark.clause("C14")
def test_c14_worker_rank_is_the_process_group_rank_one_process_per_rank(executor: Any, world_size: int) -> None:
    info = executor.collective_rpc(probes.dist_info)
    expect_equal([i[0] for i in info], list(range(world_size)), "worker.rank per entry")
    expect_equal([i[1] for i in info], list(range(world_size)), "torch.distributed.get_rank() per entry")
    expect_equal({i[2] for i in info}, {world_size}, "torch.distributed.get_world_size()")
    # On different machines two processes may have one pid: a process is its pid and PID namespace.
    processes = [tuple(p) for p in executor.collective_rpc(probes.process)]
    assert len(set(processes)) == world_size, f"got (pid, PID namespace) {processes}, expected one process per rank"


@pytest.mark.clause("C14")
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


@pytest.mark.clause("C15")
def test_c15_collectives_are_correct(executor: Any, world_size: int, executor_config: Any) -> None:
    got = executor.collective_rpc(probes.collectives, args=(executor_config.device,))
    expect_equal(got, [expected_collectives(world_size)] * world_size, "all_reduce/all_gather/broadcast/barrier")


@pytest.mark.clause("C15")
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


@pytest.mark.clause("C16")
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_c16_a_sharded_decoder_matches_the_dense_one_stage_by_stage(
    executor: Any, world_size: int, executor_config: Any, dtype: str, harness_seed: int
) -> None:
    # Vocabulary-parallel embedding and logits, attention split by heads (with KV
    # heads replicated where fewer than the ranks), MLP column- then row-parallel.
    check_decoder_stages(executor, world_size, dtype, executor_config.device, harness_seed)


@pytest.mark.clause("C16")
def test_c16_greedy_tokens_of_the_sharded_decoder_equal_the_dense_ones(
    executor: Any, world_size: int, executor_config: Any, harness_seed: int
) -> None:
    check_greedy_tokens(executor, world_size, "float32", executor_config.device, harness_seed)
