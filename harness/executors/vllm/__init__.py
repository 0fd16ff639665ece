"""vLLM's own executors under the suite: ``vllm-mp``, ``vllm-uni``, ``vllm-ray``.

Each factory builds vLLM's executor for a tiny model generated on the spot
(a random Llama saved to a temporary folder: nothing is downloaded) and hands
it to the suite as vLLM made it::

    ExecutorConfig ─► EngineArgs(tiny model, TP = world_size, backend) ─► VllmConfig
                   ─► Executor.get_class(config)  (MultiprocExecutor, UniProcExecutor,
                                                   RayExecutorV2)
                   ─► a subclass adding only what the contract's shape needs:
                      world_size, __enter__/__exit__

``collective_rpc``, ``check_health``, ``register_failure_callback`` and
``shutdown`` are vLLM's, unwrapped: no future is wrapped, no timeout added, no
argument checked, nothing retried. vLLM's behaviour is what is under test. The
start-up failure of C22 is injected through a worker subclass
(``harness.executors.vllm.workers``), chosen only when the injection is asked for.

vLLM reads its settings from the environment; those this module sets (unless
the caller has) are the ones a CPU machine needs: a small KV cache, one core
per rank, callables allowed through ``collective_rpc``, no hub access.

``vllm-ray`` is vLLM's ``RayExecutorV2`` (what ``distributed_executor_backend="ray"``
resolves to: in 0.32.0 while ``VLLM_USE_RAY_V2_EXECUTOR_BACKEND`` is 1, its
default; from 0.34.0 always, the older executor and its setting gone): a
``MultiprocExecutor`` whose workers are Ray actors. vLLM refuses Ray on a
platform without a Ray device key, its CPU platform among them. There the suite
runs it through its own vLLM platform plugin (``harness.executors.vllm.platform``:
vLLM's CPU platform with a custom Ray resource as its device key, and the Ray
actors' device discovery for that resource), which loading ``vllm-ray`` asks for
(``HARNESS_VLLM_RAY_PLATFORM=1``, unless set otherwise); where the plugin cannot
be used either, the name ``create_ray`` does not import, and the suite reports
``vllm-ray`` "not run" with vLLM's check (:func:`ray_refusal`), as it does a
backend whose package is missing.

This package holds the adapter (here), the worker subclasses of the C22
injection (``workers``), the platform plugin of ``vllm-ray`` (``platform``) and the known failures of vLLM's executors
(``vllm_known_failures.txt``). It may import what ``harness.executors`` may,
and vLLM.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from harness.contract import FAIL_INIT_ENV, ExecutorConfig, declare
from harness.executors.vllm._plugin_env import ENABLE_ENV
from harness.system.environ import environ
from harness.system.modules import module_installed

# ImportError here makes the backends "not run" with the install hint (harness.backends).
import vllm  # (isort: skip)

__all__ = ["create_mp", "create_ray", "create_uni", "greedy_tokens", "ray_refusal", "tiny_model"]

#: What the C22 injection is keyed on (the suite's; see harness.executors.mp.worker).

#: vLLM settings for a CPU machine, set unless the environment has them.
CPU_DEFAULTS = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB per worker; the default reserves most of the RAM
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # callables in collective_rpc
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}

#: How many of the plugin's Ray resource (its "devices") ``vllm-ray``'s cluster
#: declares, whatever the world size: vLLM never removes the placement group
#: ``initialize_ray_cluster`` creates (``RayExecutorV2.shutdown`` kills the actors
#: alone), so with as many devices as ranks a second executor in the same
#: process (the executor fixture's, C10's cycles) waits 1800 s (``PG_WAIT_TIMEOUT``)
#: for devices the first still holds. 64 lets 16 executors of 4 ranks start.
RAY_DEVICES = 64

_MODEL_LOCK = threading.Lock()
_MODEL_DIR: Path | None = None

#: The tiny model: CPU attention needs a head size of at least 32; 4 query heads
#: and 2 KV heads split over 1, 2 or 4 ranks (KV heads replicated at 4).
TINY_LLAMA = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "harness"


def tiny_model(dtype: str = "float32") -> str:
    """A random Llama small enough to start in seconds (seed 0), saved once per
    user under ``~/.cache/harness/`` (``$XDG_CACHE_HOME``) and reused: every test
    process builds its executor from it, and a temporary folder per process
    would be left behind by processes that end without cleaning up."""
    global _MODEL_DIR
    with _MODEL_LOCK:
        if _MODEL_DIR is None:
            import hashlib
            import json
            import shutil

            import torch
            import transformers  # type: ignore[import-not-found]

            key = json.dumps([TINY_LLAMA, dtype, transformers.__version__], sort_keys=True)
            folder = _cache_dir() / f"tiny-llama-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
            if not (folder / "config.json").exists():
                folder.parent.mkdir(parents=True, exist_ok=True)
                staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder.parent))
                torch.manual_seed(0)
                config = transformers.LlamaConfig(**TINY_LLAMA, torch_dtype=dtype)
                transformers.LlamaForCausalLM(config).save_pretrained(staging)
                try:
                    staging.rename(folder)  # whole or not at all, whoever wins a race
                except OSError:
                    shutil.rmtree(staging, ignore_errors=True)
            _MODEL_DIR = folder
        return str(_MODEL_DIR)


def _cpu_bind(world_size: int) -> str:
    """One core per rank, round robin over this process's cores ("0|1" for two ranks)."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return "|".join(str(cores[r % len(cores)]) for r in range(world_size))


def _engine_config(config: ExecutorConfig, backend: str) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    cuda = config.device == "cuda"
    kwargs: dict[str, Any] = {}
    if FAIL_INIT_ENV in config.env or FAIL_INIT_ENV in os.environ:
        kwargs["worker_cls"] = "harness.executors.vllm.workers." + ("FailingGpuWorker" if cuda else "FailingCpuWorker")
    args = EngineArgs(
        model=tiny_model(),
        tensor_parallel_size=config.world_size,
        distributed_executor_backend=backend,
        skip_tokenizer_init=True,
        enforce_eager=True,
        max_model_len=256,
        dtype="bfloat16" if cuda else "float32",
        **kwargs,
    )
    return args.create_engine_config()


def _settings(config: ExecutorConfig, backend: str) -> dict[str, str]:
    env = {k: v for k, v in CPU_DEFAULTS.items() if k not in os.environ}
    if config.device == "cpu" and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        env["VLLM_CPU_OMP_THREADS_BIND"] = _cpu_bind(config.world_size)
    if backend == "uni":
        env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if backend == "ray" and ENABLE_ENV not in os.environ:
        env[ENABLE_ENV] = "1"
    env.update(config.env)
    return env


_CLASSES: dict[type, type] = {}


def _shaped(cls: type) -> type:
    """``cls`` with the contract's shape: ``world_size`` (where vLLM's class keeps
    none of its own), and a context manager that shuts down."""
    if cls not in _CLASSES:

        def init(self: Any, vllm_config: Any) -> None:
            cls.__init__(self, vllm_config)  # type: ignore[misc]
            if not isinstance(getattr(self, "world_size", None), int):
                self.world_size = int(vllm_config.parallel_config.world_size)

        def enter(self: Any) -> Any:
            return self

        def exit_(self: Any, *exc: object) -> None:
            self.shutdown()

        _CLASSES[cls] = type(
            f"Harness{cls.__name__}",
            (cls,),
            {"__init__": init, "__enter__": enter, "__exit__": exit_, "__module__": __name__},
        )
    return _CLASSES[cls]


def _create(config: ExecutorConfig, backend: str) -> Any:
    from vllm.v1.executor.abstract import Executor

    # vLLM's workers inherit the settings from os.environ while it starts them.
    with environ(_settings(config, backend)):
        engine_config = _engine_config(config, backend)
        return _shaped(Executor.get_class(engine_config))(engine_config)


def create_mp(config: ExecutorConfig) -> Any:
    """vLLM's ``MultiprocExecutor``: a process per rank, shared-memory message queues."""
    return _create(config, "mp")


def create_uni(config: ExecutorConfig) -> Any:
    """vLLM's ``UniProcExecutor``: the one worker in the caller's process (world size 1)."""
    return _create(config, "uni")


def _create_ray(config: ExecutorConfig) -> Any:
    """vLLM's ``RayExecutorV2``: a Ray actor per rank, driven through vLLM's
    shared-memory message queues (only where :func:`ray_refusal` is None).

    On vLLM's CPU platform this process's Ray is started here, where vLLM's own
    ``initialize_ray_cluster`` would start it (a local cluster living as long as
    the process: vLLM never shuts it down), with what the suite's platform
    plugin needs: the custom resource of its device key (:data:`RAY_DEVICES`),
    and the actors' set-up hook. vLLM then finds Ray initialized, and skips its own
    ``ray.init``; it copies the runtime_env to its actors."""
    from harness.executors.vllm import platform as plugin

    plugin.check_driver()
    with environ(_settings(config, "ray")):
        if plugin.is_ours():
            _init_ray(config.world_size)
        try:
            return _create(config, "ray")
        except Exception as exc:
            missed = plugin.missed_override(exc)
            if missed is not None:
                raise plugin.PluginNotAppliedError(missed) from exc
            raise


def _init_ray(world_size: int) -> None:
    import atexit

    import ray

    from harness.executors.ray.cluster import LocalCluster
    from harness.executors.ray.executor import _reload_auth
    from harness.executors.vllm import platform as plugin

    if ray.is_initialized():
        return
    # Under the keeper of harness.executors.ray.cluster, not ray.init's own: the
    # dashboard and runtime-env agents that ray.init starts outlived the test's
    # process (the suite killed them 13 s after it ended), and the keeper stops
    # the whole cluster when this process ends, however it ends. Ray puts unix
    # sockets under the keeper's folder, of 107 bytes at most: a test's own
    # TMPDIR is too deep for them.
    with environ({"TMPDIR": "/tmp"} if len(tempfile.gettempdir()) > _TMPDIR_MAX else {}):
        cluster = LocalCluster.start(world_size, resources={plugin.RESOURCE: float(max(RAY_DEVICES, world_size))})
    atexit.register(cluster.stop)  # after Ray's own shutdown at exit, registered later
    driver_env = cluster.driver_env()
    del driver_env["RAY_ADDRESS"]
    os.environ.update(driver_env)  # its token, as vLLM's actors get this process's environment
    _reload_auth()
    ray.init(
        address=cluster.address,
        _temp_dir=cluster.temp_dir,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"worker_process_setup_hook": plugin.SETUP_HOOK, "env_vars": {plugin.ENABLE_ENV: "1"}},
    )


#: The deepest TMPDIR under which the keeper's folder keeps Ray's socket paths
#: (``<TMPDIR>/hray-XXXXXXXX/session_<date>_<pid>/sockets/plasma_store``) within
#: AF_UNIX's 107 bytes.
_TMPDIR_MAX = 107 - len("/hray-XXXXXXXX/session_2026-12-07_23-59-57_650033_4194304/sockets/plasma_store")


_create_ray.__name__ = _create_ray.__qualname__ = "create_ray"


def _vllm_line(relpath: str, needle: str, after: str = "") -> str:
    """``vllm/<relpath>:<line>`` of the first line holding ``needle`` (past the first
    holding ``after``) in the vLLM installed; the bare path where another release
    words it otherwise. Read as text: importing vLLM's Ray modules imports Ray,
    which reads its settings from the environment (the test's, not the suite's)."""
    where = f"vllm/{relpath}"
    try:
        lines = (Path(vllm.__file__).parent / relpath).read_text().splitlines()
    except OSError:
        return where
    start = next((i for i, line in enumerate(lines) if after in line), len(lines)) if after else 0
    found = next((i for i in range(start, len(lines)) if needle in lines[i]), None)
    return where if found is None else f"{where}:{found + 1}"


def ray_refusal() -> str | None:
    """Why vLLM cannot build ``vllm-ray`` here, naming vLLM's check; None where it can.

    - Ray itself: ``ParallelConfig._verify_args`` (vllm/config/parallel.py) calls
      ``ray_utils.assert_ray_available()``, which raises ``ValueError("Failed to
      import Ray ...")`` when Ray is not installed (``executor-harness[ray]``).
    - The platform: ``initialize_ray_cluster`` (vllm/v1/executor/ray_utils.py), the
      first step of ``RayExecutorV2._init_executor`` (and of the older
      ``RayDistributedExecutor``'s), raises ``ValueError("current platform cpu does
      not support ray.")`` when ``current_platform.ray_device_key`` is empty, which
      it is on every platform but CUDA, ROCm and XPU: ``CpuPlatform``
      (vllm/platforms/cpu.py) keeps ``Platform``'s ``""`` (vllm/platforms/interface.py,
      "empty string means the device does not support ray"). No setting of vLLM
      changes that key; the suite's platform plugin does, where it can be used
      (:func:`harness.executors.vllm.platform.unusable` says why not): this asks
      for it (``HARNESS_VLLM_RAY_PLATFORM=1`` in this process, unless set
      already) before it resolves vLLM's platform, and keeps that setting where
      the plugin's platform is the one resolved.
    """
    if not module_installed("ray"):
        return (
            "vLLM refuses distributed_executor_backend='ray' without Ray: ParallelConfig._verify_args "
            f"({_vllm_line('config/parallel.py', 'ray_utils.assert_ray_available()')}) calls "
            "ray_utils.assert_ray_available(), which raises ValueError('Failed to import Ray ...'); "
            "Ray is not installed here: pip install 'executor-harness[vllm,ray]'"
        )
    # Asks for the plugin, as the suite's processes must before vLLM resolves its
    # platform (once per process), unless the environment says otherwise; takes
    # it back where it did not apply, so that no process started from here
    # resolves another platform than this one.
    from harness.executors.vllm import platform as plugin

    asked = plugin.ENABLE_ENV not in os.environ
    if asked:
        os.environ[plugin.ENABLE_ENV] = "1"
    from vllm.platforms import current_platform

    if asked and not plugin.is_ours():
        del os.environ[plugin.ENABLE_ENV]
    if not current_platform.ray_device_key:
        name = current_platform.device_name
        why = plugin.unusable() or (
            f"{plugin.ENABLE_ENV}={os.environ[plugin.ENABLE_ENV]!r} does not ask for it"
            if os.environ.get(plugin.ENABLE_ENV, "1") != "1"
            else "vLLM resolved its platform in this process before it was asked for"
        )
        return (
            f"vLLM refuses Ray on its {name} platform: initialize_ray_cluster "
            f"({_vllm_line('v1/executor/ray_utils.py', 'if not device_str:', 'def initialize_ray_cluster')}), "
            "RayExecutorV2's first step, checks `if not current_platform.ray_device_key` and raises "
            f"ValueError('current platform {name} does not support ray.'); {type(current_platform).__name__} "
            f"({type(current_platform).__module__.replace('.', '/')}.py) keeps Platform.ray_device_key = '' "
            f"({_vllm_line('platforms/interface.py', 'ray_device_key: str =')}, 'the device does not support ray'), "
            f"and the suite's platform plugin, which gives it one, cannot be used: {why}. "
            "vllm-ray needs the plugin, or vLLM's CUDA, ROCm or XPU build, with Ray"
        )
    return None


def __getattr__(name: str) -> Any:
    """``create_ray`` where vLLM can run Ray; where it cannot, an ImportError with
    the reason, which the suite reports as ``vllm-ray`` not run (harness.backends).

    :func:`ray_refusal` asks for the suite's platform plugin first: vLLM resolves
    its platform once per process, and the suite loads its backends before it
    imports vLLM's modules; its test processes and vLLM's workers and actors all
    inherit the setting. In a run that loads ``vllm-ray`` the other ``vllm-*``
    backends then run on the plugin's platform too, which is vLLM's CPU
    platform but for its Ray device key, which only Ray's code reads."""
    if name == "create_ray":
        reason = ray_refusal()
        if reason is not None:
            raise ImportError(reason, name=__name__)
        return _create_ray
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def greedy_tokens(
    model: str,
    tensor_parallel_size: int,
    backend: str,
    device: str,
    prompts: list[list[int]],
    steps: int,
    pipeline_parallel_size: int = 1,
) -> list[list[int]]:
    """The token ids vLLM's engine picks greedily for ``prompts`` (lists of token ids),
    ``steps`` each, with the tiny model at ``model`` split over ``tensor_parallel_size``
    ranks in each of ``pipeline_parallel_size`` stages by ``backend``'s executor:
    float32 on CPUs, bfloat16 on GPUs. Meant to run in a process of its own: the
    engine's cleanup is not to be trusted across engines."""
    from vllm import LLM, SamplingParams

    world_size = tensor_parallel_size * pipeline_parallel_size
    config = ExecutorConfig(world_size, device, "nccl" if device == "cuda" else "gloo")
    with environ(_settings(config, backend)):
        llm = LLM(
            model=model,
            tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size,
            distributed_executor_backend=backend,
            skip_tokenizer_init=True,
            enforce_eager=True,
            max_model_len=256,
            dtype="bfloat16" if device == "cuda" else "float32",
            seed=0,
        )
        params = SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True, detokenize=False)
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [list(out.outputs[0].token_ids) for out in outputs]


def _vllm_version() -> str:
    from importlib import metadata

    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return f"vllm {getattr(vllm, '__version__', 'unknown')}"


#: What vLLM 0.32 is known to fail (harness/pytest_plugin/expected.py), and the version installed, for the report.
KNOWN_FAILURES = str(Path(__file__).with_name("vllm_known_failures.txt"))
for _factory in (create_mp, create_uni, _create_ray):
    # vLLM's CPU platform starts workers with spawn whatever it is asked.
    declare(_factory, expected_failures=KNOWN_FAILURES, version=_vllm_version, start_methods=("spawn",))
declare(create_uni, world_sizes=(1,))

# Imported once in the suite's process, before it forks a process per test:
# vLLM's import costs each test about 5 s of CPU otherwise. Importing them
# starts no thread.
_PRELOAD = (
    "vllm.engine.arg_utils",
    "vllm.v1.executor.abstract",
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.worker.cpu_worker",  # vllm-uni's worker runs in the caller
    "vllm.model_executor.models.llama",
)
for _factory in (create_mp, create_uni, _create_ray):
    _factory.preload = _PRELOAD  # type: ignore[attr-defined]
