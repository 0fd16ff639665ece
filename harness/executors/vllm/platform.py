"""A vLLM platform plugin that lets vLLM's own ``RayExecutorV2`` run on CPUs (``vllm-ray``).

vLLM refuses Ray on its CPU platform: ``initialize_ray_cluster``
(vllm/v1/executor/ray_utils.py) raises ``ValueError("current platform cpu does
not support ray.")`` when ``current_platform.ray_device_key`` is empty, and
``CpuPlatform`` keeps ``Platform``'s ``""``. vLLM picks its platform through the
``vllm.platform_plugins`` entry point group, where an out-of-tree plugin wins
over the built-in one: this module is such a plugin (``harness_ray_cpu`` in
pyproject.toml), the way vllm-metal runs Ray.

It is active only where the adapter asks for it: :func:`platform_plugin` returns
None, and vLLM behaves exactly as installed, unless ``HARNESS_VLLM_RAY_PLATFORM=1``
is set in the process when vLLM first resolves ``current_platform``, and vLLM's
own detection picks its plain ``CpuPlatform`` there.

What it changes in vLLM, and nothing else (no executor logic is touched):

- ``vllm.platforms.cpu.CpuPlatform.ray_device_key`` (by subclassing:
  :class:`RayCpuPlatform`): ``""`` becomes :data:`RESOURCE`, a custom Ray
  resource the adapter declares in ``ray.init(resources={RESOURCE: n})``.
  vLLM's own code then asks Ray for it: ``initialize_ray_cluster`` builds its
  placement group of ``{RESOURCE: 1.0}`` bundles, ``get_bundles_sorted_by_node``
  keeps the bundles holding it, and ``RayExecutorV2._get_actor_resource_kwargs``
  gives each actor ``num_gpus=0, resources={RESOURCE: 1}``. Everything else is
  ``CpuPlatform``'s, inherited.
- ``vllm.v1.executor.ray_executor_v2.RayWorkerProc.get_node_and_physical_gpu_ids``
  (replaced in each Ray actor by :func:`setup_actor`, the actors'
  ``worker_process_setup_hook``): vLLM's reads
  ``ray.get_runtime_context().get_accelerator_ids()[ray_device_key]``, and Ray
  lists only its accelerators there (GPU, TPU, ...), never a custom resource:
  KeyError in every actor. The replacement returns the node id as vLLM's does,
  and as the "physical device" the worker's rank: the CPU worker reads no
  device id (it binds cores by ``VLLM_CPU_OMP_THREADS_BIND`` and its local
  rank), and the executor only sorts these ids per node. Ray imports the actor
  class anew in every actor process, so the replacement must be made there:
  the adapter's ``ray.init(runtime_env={"worker_process_setup_hook": ...})`` runs
  :func:`setup_actor` in each Ray worker process before the actor's class
  loads, and vLLM copies that runtime_env to its actors
  (``EngineArgs.create_engine_config`` -> ``parallel_config.ray_runtime_env`` ->
  ``RayExecutorV2._build_runtime_env``).

:func:`check_driver` and :func:`check_actor` say, naming the override, when one
did not take effect: a run where the plugin did not apply fails as the suite's
set-up, never as a finding about vLLM.
"""

from __future__ import annotations

import os
from typing import Any

from vllm.platforms.cpu import CpuPlatform

from harness.executors.vllm._plugin_env import ENABLE_ENV

__all__ = [
    "ENABLE_ENV",
    "ENTRY_POINT",
    "RESOURCE",
    "SETUP_HOOK",
    "PluginNotAppliedError",
    "RayCpuPlatform",
    "check_actor",
    "check_driver",
    "is_ours",
    "missed_override",
    "platform_plugin",
    "setup_actor",
    "unusable",
]

#: The custom Ray resource standing for a CPU "device" (one per rank).
RESOURCE = "harness_vllm_cpu"
#: The Ray worker process set-up hook that replaces the actors' device discovery.
SETUP_HOOK = f"{__name__}.setup_actor"
#: The entry point group and value vLLM loads platform plugins by.
ENTRY_POINT = ("vllm.platform_plugins", f"{__name__}:platform_plugin")
#: vLLM's built-in CPU platform, the only one this plugin stands in for.
_CPU_PLATFORM = "vllm.platforms.cpu.CpuPlatform"
#: The name of the replaced method, in vLLM's module.
OVERRIDDEN_METHOD = "vllm.v1.executor.ray_executor_v2.RayWorkerProc.get_node_and_physical_gpu_ids"


class PluginNotAppliedError(RuntimeError):
    """The suite's set-up of ``vllm-ray`` did not take effect: not a finding about vLLM."""


def platform_plugin() -> str | None:
    """vLLM's ``vllm.platform_plugins`` entry point: :class:`RayCpuPlatform`'s name
    where the adapter asked for it and vLLM's detection picks its plain CPU
    platform; None (vLLM as installed) anywhere else."""
    if os.environ.get(ENABLE_ENV) != "1":
        return None
    from vllm.platforms import cpu_platform_plugin

    if cpu_platform_plugin() != _CPU_PLATFORM:
        return None
    return f"{__name__}.RayCpuPlatform"


def unusable() -> str | None:
    """Why vLLM would not pick :class:`RayCpuPlatform` in a new process asking for
    it; None where it would. Resolves no platform."""
    from importlib.metadata import entry_points

    group, value = ENTRY_POINT
    names = [ep.name for ep in entry_points(group=group) if ep.value == value]
    if not names:
        return (
            f"the suite's vLLM platform plugin is not installed: no {group!r} entry point names {value!r} "
            "(reinstall executor-harness, whose pyproject.toml declares it)"
        )
    if os.environ.get("VLLM_TARGET_DEVICE", "").lower() == "cpu":
        return "VLLM_TARGET_DEVICE=cpu makes vLLM pick its CPU platform without asking the platform plugins"
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and names[0] not in allowed.split(","):
        return f"VLLM_PLUGINS={allowed!r} leaves out the suite's platform plugin {names[0]!r}"
    from vllm.platforms import cpu_platform_plugin

    picked = cpu_platform_plugin()
    if picked != _CPU_PLATFORM:
        return f"vLLM's CPU detection picks {picked!r}, not {_CPU_PLATFORM!r}, which the plugin subclasses"
    return None


class RayCpuPlatform(CpuPlatform):  # type: ignore[misc]
    """vLLM's ``CpuPlatform`` with a Ray device key: the custom resource :data:`RESOURCE`."""

    ray_device_key: str = RESOURCE


def _node_and_device_ids(self: Any) -> tuple[str, list[int]]:
    """``RayWorkerProc.get_node_and_physical_gpu_ids`` for :data:`RESOURCE`, which
    Ray's ``get_accelerator_ids()`` does not list: this node's id, and the rank
    standing for the device (the CPU worker reads none)."""
    import ray

    return ray.get_runtime_context().get_node_id(), [int(self._init_kwargs["rank"])]


_node_and_device_ids.__qualname__ = "RayWorkerProc.get_node_and_physical_gpu_ids"


def setup_actor() -> None:
    """Ray's ``worker_process_setup_hook``: runs in each Ray worker process before
    it loads an actor's class; replaces vLLM's device discovery for :data:`RESOURCE`."""
    from vllm.v1.executor import ray_executor_v2

    ray_executor_v2.RayWorkerProc.get_node_and_physical_gpu_ids = _node_and_device_ids


def is_ours() -> bool:
    """Whether this process's vLLM platform is :class:`RayCpuPlatform`."""
    from vllm.platforms import current_platform

    return isinstance(current_platform, RayCpuPlatform)


def missed_override(exc: BaseException) -> str | None:
    """What did not take effect, where ``exc`` (the executor's start-up failure)
    is vLLM's own device discovery failing on :data:`RESOURCE` in an actor (the
    set-up hook did not run there); None for any other failure."""
    text = f"{exc!r} {exc}"
    if f"KeyError: '{RESOURCE}'" in text or f"KeyError({RESOURCE!r})" in text:
        return (
            f"vllm-ray: the suite's override of {OVERRIDDEN_METHOD} did not take effect in a Ray actor "
            f"(its set-up hook {SETUP_HOOK} did not run there): vLLM's own method looked up {RESOURCE!r} "
            f"in Ray's accelerator ids: {type(exc).__name__}: {str(exc).strip().splitlines()[-1]}"
        )
    return None


def check_driver() -> None:
    """Raise :class:`PluginNotAppliedError` unless this process's vLLM platform is
    :class:`RayCpuPlatform` (or one that runs Ray by itself)."""
    from vllm.platforms import current_platform

    if isinstance(current_platform, RayCpuPlatform):
        return
    if current_platform.ray_device_key:
        return
    why = unusable() or (
        f"vLLM resolved its platform in this process before {ENABLE_ENV}=1 was set"
        if os.environ.get(ENABLE_ENV) == "1"
        else f"{ENABLE_ENV} is not 1"
    )
    raise PluginNotAppliedError(
        f"vllm-ray: the suite's vLLM platform plugin did not apply: current_platform is "
        f"{type(current_platform).__module__}.{type(current_platform).__qualname__} (ray_device_key "
        f"{current_platform.ray_device_key!r}), not {__name__}.RayCpuPlatform: {why}"
    )


def check_actor(_worker: Any = None) -> dict[str, str]:
    """What a Ray actor of ``vllm-ray`` runs with (its worker calls it through
    ``collective_rpc``, which passes the worker as ``_worker``): its
    platform and device discovery; raises :class:`PluginNotAppliedError` naming
    the override that did not take effect there."""
    from vllm.platforms import current_platform
    from vllm.v1.executor import ray_executor_v2

    platform = f"{type(current_platform).__module__}.{type(current_platform).__qualname__}"
    method = ray_executor_v2.RayWorkerProc.get_node_and_physical_gpu_ids
    found = {"platform": platform, "ray_device_key": current_platform.ray_device_key, "discovery": method.__module__}
    if current_platform.ray_device_key != RESOURCE:
        raise PluginNotAppliedError(f"vllm-ray: in the Ray actor the platform is {platform}, not the plugin's: {found}")
    if method is not _node_and_device_ids:
        raise PluginNotAppliedError(f"vllm-ray: in the Ray actor {OVERRIDDEN_METHOD} is vLLM's own: {found}")
    return found
