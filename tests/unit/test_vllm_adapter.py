"""The ``vllm-*`` adapter's own plumbing, without vLLM: a stand-in ``vllm`` module
lets ``harness.executors.vllm`` import, and a stand-in executor class shows
what the adapter adds to vLLM's (and that it adds nothing to the calls)."""

from __future__ import annotations

import importlib
import os
import sys
import types
from typing import Any

import pytest

from harness import ExecutorConfig


@pytest.fixture
def adapter(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.delitem(sys.modules, "harness.executors.vllm", raising=False)
    module = importlib.import_module("harness.executors.vllm")
    yield module
    sys.modules.pop("harness.executors.vllm", None)


class _VllmLike:
    """Like vLLM's executors: the config in, methods of its own; the multiprocess one
    sets ``world_size`` itself, the single-process one does not."""

    sets_world_size = False

    def __init__(self, vllm_config: Any) -> None:
        self.parallel_config = vllm_config.parallel_config
        self.shut = 0
        if self.sets_world_size:
            self.world_size = vllm_config.parallel_config.world_size

    def collective_rpc(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        return ("vllm's own", method, args, kwargs)

    def shutdown(self) -> None:
        self.shut += 1


class _SetsWorldSize(_VllmLike):
    sets_world_size = True


def _config(world_size: int) -> Any:
    return types.SimpleNamespace(parallel_config=types.SimpleNamespace(world_size=world_size))


@pytest.mark.parametrize("cls", [_VllmLike, _SetsWorldSize])
def test_the_adapter_adds_world_size_and_the_context_manager_and_nothing_else(adapter: Any, cls: type) -> None:
    shaped = adapter._shaped(cls)
    assert issubclass(shaped, cls) and adapter._shaped(cls) is shaped
    added = set(vars(shaped)) - {"__module__", "__doc__", "__dict__", "__weakref__"}
    assert added == {"__init__", "__enter__", "__exit__"}, f"the adapter adds {sorted(added)}"
    with shaped(_config(2)) as ex:
        assert ex.world_size == 2
        # The calls are vLLM's: not wrapped, not checked.
        assert ex.collective_rpc("m", 1, unique_reply_rank=7) == ("vllm's own", "m", (1,), {"unique_reply_rank": 7})
    assert ex.shut == 1


def test_each_rank_gets_a_core_of_its_own_round_robin(adapter: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5})
    assert adapter._cpu_bind(1) == "4"
    assert adapter._cpu_bind(2) == "4|5"
    assert adapter._cpu_bind(4) == "4|5|4|5"


def test_the_settings_a_cpu_needs_yield_to_the_callers_environment_and_the_configs_env(
    adapter: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    env = adapter._settings(ExecutorConfig(2, env={"VLLM_CPU_KVCACHE_SPACE": "2"}), "mp")
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"  # the config's env wins
    assert "HF_HUB_OFFLINE" not in env  # the caller's own setting stays
    assert env["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"
    assert len(env["VLLM_CPU_OMP_THREADS_BIND"].split("|")) == 2
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in env
    assert adapter._settings(ExecutorConfig(1), "uni")["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_the_settings_hold_only_while_vllm_starts_and_are_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.system.environ import environ

    monkeypatch.setenv("HARNESS_TEST_KEPT", "before")
    monkeypatch.delenv("HARNESS_TEST_NEW", raising=False)
    with pytest.raises(RuntimeError), environ({"HARNESS_TEST_KEPT": "during", "HARNESS_TEST_NEW": "during"}):
        assert os.environ["HARNESS_TEST_KEPT"] == os.environ["HARNESS_TEST_NEW"] == "during"
        raise RuntimeError("vLLM failed to start")
    assert os.environ["HARNESS_TEST_KEPT"] == "before" and "HARNESS_TEST_NEW" not in os.environ


def test_the_backends_declare_what_vllm_decides_for_itself(adapter: Any) -> None:
    # vLLM's CPU platform starts workers with spawn whatever it is asked; the
    # single-process executor runs world size 1 only.
    assert adapter.create_mp.start_methods == adapter.create_uni.start_methods == ("spawn",)
    assert adapter.create_uni.world_sizes == (1,)
    assert not hasattr(adapter.create_mp, "unsupported"), "vllm-mp declares a clause away"
