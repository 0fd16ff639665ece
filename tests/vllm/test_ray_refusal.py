"""``vllm-ray`` where vLLM refuses Ray: "not run", with vLLM's own check named.

vLLM's ``RayExecutorV2`` (and the older ``RayDistributedExecutor``) starts with
``initialize_ray_cluster`` (vllm/v1/executor/ray_utils.py), which refuses a
platform whose ``ray_device_key`` is empty, vLLM's CPU platform among them.
The suite's platform plugin gives that platform a key (tests/vllm/test_ray_platform.py);
where the plugin cannot be used, or Ray is missing, the adapter refuses as vLLM
would: these tests hold its reason to vLLM's check, to the lines it names, to
why the plugin could not be used, and to the suite's way of reporting a backend
that cannot run here (``BackendUnavailableError``, read "not run").

This process resolved vLLM's platform at collection, without the plugin (nothing
asked for it yet): vLLM's plain CPU platform, which refuses Ray.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import vllm
from vllm.platforms import current_platform

import harness.executors.vllm as adapter
from harness.backends import BackendUnavailableError, load_backend
from harness.executors.vllm import platform as plugin

REFUSED = not current_platform.ray_device_key
needs_refusal = pytest.mark.skipif(not REFUSED, reason=f"vLLM's {current_platform.device_name} platform runs Ray")


def _named_lines(reason: str) -> dict[str, str]:
    """``vllm/<path>:<line>`` in ``reason`` -> the text of that line in the vLLM installed."""
    root = Path(vllm.__file__).parent
    out = {}
    for rel, line in re.findall(r"vllm/([\w/]+\.py):(\d+)", reason):
        out[f"{rel}:{line}"] = (root / rel).read_text().splitlines()[int(line) - 1]
    return out


@pytest.fixture
def plugin_unusable(monkeypatch: pytest.MonkeyPatch) -> str:
    """Ray installed, and the plugin unusable: vLLM told to skip the platform plugins."""
    monkeypatch.setattr(adapter, "module_installed", lambda name: True)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")  # loading vllm-ray sets it: kept to this test
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    reason = plugin.unusable()
    assert reason is not None
    return reason


@needs_refusal
def test_vllm_ray_is_unavailable_with_vllm_check_named(plugin_unusable: str) -> None:
    with pytest.raises(BackendUnavailableError) as info:
        load_backend("vllm-ray")
    text = str(info.value)
    assert "backend 'vllm-ray' is not available: vLLM refuses Ray" in text
    assert f"current platform {current_platform.device_name} does not support ray." in text
    lines = _named_lines(text)
    assert any(k.startswith("v1/executor/ray_utils.py:") and "if not device_str:" in v for k, v in lines.items()), lines
    assert any(k.startswith("platforms/interface.py:") and 'ray_device_key: str = ""' in v for k, v in lines.items())
    assert f"the suite's platform plugin, which gives it one, cannot be used: {plugin_unusable}" in text


@needs_refusal
def test_a_platform_resolved_before_the_plugin_was_asked_for_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter, "module_installed", lambda name: True)
    monkeypatch.setattr(plugin, "unusable", lambda: None)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    reason = adapter.ray_refusal()
    assert reason is not None
    assert "cannot be used: vLLM resolved its platform in this process before it was asked for" in reason
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    assert f"cannot be used: {plugin.ENABLE_ENV}='0' does not ask for it" in str(adapter.ray_refusal())


@needs_refusal
def test_the_plugin_asked_for_in_vain_is_taken_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes started from here must resolve the platform this one did."""
    monkeypatch.setattr(adapter, "module_installed", lambda name: True)
    monkeypatch.delenv(plugin.ENABLE_ENV, raising=False)
    assert adapter.ray_refusal() is not None
    assert plugin.ENABLE_ENV not in os.environ


@needs_refusal
def test_create_ray_does_not_import_where_vllm_refuses_ray(plugin_unusable: str) -> None:
    with pytest.raises(ImportError, match="does not support ray"):
        from harness.executors.vllm import create_ray  # noqa: F401
    # vllm-mp and vllm-uni load from the same module as before.
    assert load_backend("vllm-mp").start_methods == ("spawn",)
    assert load_backend("vllm-uni").world_sizes == (1,)


@needs_refusal
def test_the_refusal_is_vllm_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's initialize_ray_cluster itself raises what the reason quotes, with a
    stand-in for a Ray already started (no cluster is started, Ray need not be installed)."""
    from vllm.v1.executor import ray_utils

    monkeypatch.setattr(ray_utils, "ray", SimpleNamespace(is_initialized=lambda: True))
    with pytest.raises(ValueError, match=re.escape(f"current platform {current_platform.device_name} does not")):
        ray_utils.initialize_ray_cluster(SimpleNamespace(world_size=2), require_gpu_on_driver=False)


def test_without_ray_the_reason_names_vllm_check_and_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type(current_platform), "ray_device_key", "GPU")
    monkeypatch.setitem(sys.modules, "ray", None)  # what a missing package looks like
    reason = adapter.ray_refusal()
    assert reason is not None
    assert "ray_utils.assert_ray_available()" in reason
    assert "pip install 'executor-harness[vllm,ray]'" in reason
    lines = _named_lines(reason)
    assert any(k.startswith("config/parallel.py:") and "assert_ray_available()" in v for k, v in lines.items()), lines


def test_where_vllm_runs_ray_create_ray_is_its_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")  # loading vllm-ray sets it: kept to this test
    monkeypatch.setattr(type(current_platform), "ray_device_key", "GPU")
    monkeypatch.setattr(adapter, "module_installed", lambda name: True)
    assert adapter.ray_refusal() is None
    loaded = load_backend("vllm-ray")
    assert loaded.factory.__name__ == "create_ray"
    assert loaded.start_methods == ("spawn",)
    assert loaded.expected_failures == adapter.KNOWN_FAILURES
    assert "vllm.v1.executor.abstract" in loaded.preload
