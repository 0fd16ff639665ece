"""Unit tests of harness.contract: the config, its validation, the error classes."""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import pickle
from typing import Any

import pytest

from harness.contract import (
    CLAUSES,
    DEVICES,
    START_METHODS,
    ExecutorConfig,
    ExecutorError,
    ExecutorShutdownError,
    RemoteCallError,
    RPCTimeoutError,
    SerializationError,
    WorkerDiedError,
    WorkerInitError,
    method_name,
)

# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, False, "2", None, 2.0])
def test_bad_world_size_raises_value_error_naming_field_and_value(bad: Any) -> None:
    with pytest.raises(ValueError, match="world_size") as info:
        ExecutorConfig(world_size=bad)
    assert repr(bad) in str(info.value)


def test_world_size_string_is_quoted_in_the_message() -> None:
    with pytest.raises(ValueError, match=r"world_size must be an int >= 1, got '2'$"):
        ExecutorConfig(world_size="2")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("device", "gpu"),
        ("device", "CPU"),
        ("device", ""),
        ("device", None),
        ("start_method", "thread"),
        ("start_method", "Spawn"),
        ("dist_backend", "tcp"),
        ("dist_backend", ""),
        ("init_timeout_s", 0),
        ("init_timeout_s", -1.0),
        ("init_timeout_s", "10"),
        ("init_timeout_s", True),
        ("init_timeout_s", None),
        ("init_timeout_s", float("nan")),
    ],
)
def test_bad_field_raises_value_error_naming_field_and_value(field: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=f"ExecutorConfig.{field} ") as info:
        ExecutorConfig(world_size=1, **{field: bad})
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize(
    "env",
    [{"A": 1}, {"A": None}, {1: "x"}, {"A": b"x"}, {b"A": "x"}],
)
def test_env_must_map_str_to_str(env: dict[Any, Any]) -> None:
    with pytest.raises(ValueError, match=r"ExecutorConfig\.env must map str to str") as info:
        ExecutorConfig(world_size=1, env=env)
    key, value = next(iter(env.items()))
    assert repr(key) in str(info.value)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("start_method", START_METHODS)
def test_valid_configs(device: str, start_method: str) -> None:
    c = ExecutorConfig(world_size=4, device=device, start_method=start_method, dist_backend="nccl", init_timeout_s=1)
    assert (c.world_size, c.device, c.start_method, c.dist_backend, c.init_timeout_s) == (
        4,
        device,
        start_method,
        "nccl",
        1,
    )


@pytest.mark.parametrize("bad", [0, -2, 1.0, True, "2", None])
def test_nodes_must_be_an_int_of_at_least_one(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"ExecutorConfig\.nodes must be an int >= 1") as info:
        ExecutorConfig(world_size=4, nodes=bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize(("world_size", "nodes"), [(4, 3), (2, 4), (1, 2)])
def test_nodes_must_divide_the_world_size(world_size: int, nodes: int) -> None:
    """The same number of ranks on every node: rank r on node r // (world_size / nodes)."""
    with pytest.raises(ValueError, match="nodes must divide world_size") as info:
        ExecutorConfig(world_size=world_size, nodes=nodes)
    assert f"nodes={nodes}" in str(info.value) and f"world_size={world_size}" in str(info.value)


@pytest.mark.parametrize(("world_size", "nodes"), [(4, 2), (4, 4), (2, 1), (6, 3)])
def test_nodes_that_divide_the_world_size_are_valid(world_size: int, nodes: int) -> None:
    assert ExecutorConfig(world_size=world_size, nodes=nodes).nodes == nodes


def test_defaults() -> None:
    c = ExecutorConfig(world_size=1)
    assert c.nodes == 1
    assert c.device == "cpu"
    assert c.dist_backend == "gloo"
    assert c.start_method == "spawn"
    assert dict(c.env) == {}
    assert c.init_timeout_s == 120.0


# --------------------------------------------------------------------------- frozen, hashable, picklable


def test_config_is_frozen() -> None:
    c = ExecutorConfig(world_size=2, env={"A": "1"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.world_size = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        c.env["B"] = "2"  # type: ignore[index]
    with pytest.raises(AttributeError):
        c.env.extra = 1  # type: ignore[attr-defined]


def test_env_is_a_copy_the_caller_cannot_change() -> None:
    env = {"A": "1"}
    c = ExecutorConfig(world_size=1, env=env)
    env["A"] = "changed"
    env["B"] = "2"
    assert dict(c.env) == {"A": "1"}


def test_config_is_hashable_and_equal_by_value() -> None:
    a = ExecutorConfig(world_size=2, env={"A": "1", "B": "2"})
    b = ExecutorConfig(world_size=2, env={"B": "2", "A": "1"})
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != ExecutorConfig(world_size=2, env={"A": "1"})
    assert a != dataclasses.replace(a, world_size=3)
    assert a.env == {"A": "1", "B": "2"}


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_config_is_picklable_with_its_env(protocol: int) -> None:
    c = ExecutorConfig(world_size=3, device="cuda", start_method="fork", env={"X": "1", "Y": ""}, init_timeout_s=2.5)
    back = pickle.loads(pickle.dumps(c, protocol=protocol))
    assert back == c
    assert hash(back) == hash(c)
    assert dict(back.env) == {"X": "1", "Y": ""}
    assert type(back.env) is type(c.env)


def test_config_copies_and_replace_revalidate() -> None:
    c = ExecutorConfig(world_size=2, env={"A": "1"})
    assert copy.deepcopy(c) == c
    assert copy.copy(c) == c
    assert dataclasses.replace(c, world_size=5).env == {"A": "1"}
    with pytest.raises(ValueError, match="world_size"):
        dataclasses.replace(c, world_size=0)


# --------------------------------------------------------------------------- errors


def test_rpc_timeout_error_is_a_timeout_error_and_an_executor_error() -> None:
    err = RPCTimeoutError("rank 1: collective_rpc('m') timed out after 1 s")
    assert isinstance(err, TimeoutError)
    assert isinstance(err, concurrent.futures.TimeoutError)
    assert isinstance(err, ExecutorError)
    assert isinstance(err, RuntimeError)
    with pytest.raises(TimeoutError):
        raise err


@pytest.mark.parametrize(
    "cls", [ExecutorShutdownError, WorkerDiedError, WorkerInitError, RemoteCallError, SerializationError]
)
def test_every_error_is_an_executor_error(cls: type[Exception]) -> None:
    assert issubclass(cls, ExecutorError)
    assert issubclass(ExecutorError, RuntimeError)


def test_worker_died_error_names_rank_pid_and_exit_code() -> None:
    err = WorkerDiedError(3, 4242, -9)
    assert (err.rank, err.pid, err.exitcode) == (3, 4242, -9)
    msg = str(err)
    assert "rank 3" in msg
    assert "4242" in msg
    assert "-9" in msg
    assert "exit code -9" in msg
    detailed = WorkerDiedError(0, None, None, "killed by the OOM killer")
    assert "rank 0" in str(detailed)
    assert str(detailed).endswith("; killed by the OOM killer")


def test_remote_call_error_carries_rank_method_and_remote_traceback() -> None:
    tb = "Traceback (most recent call last):\n  File \"w.py\", line 1, in f\nKeyError: 'k'\n"
    err = RemoteCallError(2, "load_model", "KeyError", "'k'", tb)
    assert err.rank == 2
    assert err.method == "load_model"
    assert err.exc_type == "KeyError"
    assert err.remote_message == "'k'"
    assert err.remote_traceback == tb
    msg = str(err)
    assert "rank 2" in msg
    assert "'load_model'" in msg
    assert "KeyError" in msg
    assert tb in msg


def test_method_name() -> None:
    def local_fn() -> None:
        pass

    assert method_name("ping") == "ping"
    assert method_name(local_fn).endswith("local_fn")
    assert method_name(len) == "len"


def test_clause_ids_are_c1_to_cn() -> None:
    assert list(CLAUSES) == [f"C{i}" for i in range(1, len(CLAUSES) + 1)]
    assert all(isinstance(v, str) and v for v in CLAUSES.values())
    with pytest.raises(TypeError):
        CLAUSES["C99"] = "x"  # type: ignore[index]
