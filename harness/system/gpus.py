"""What the machine's GPUs hold, read without initialising CUDA in this process.

The GPU tier's fault checks (C8, C9) ask whether an executor's processes have
let go of their GPUs and whether GPU memory came back to where it was. The
pytest process must not initialise CUDA to find out (a process forked from one
that did cannot use CUDA), so this reads NVML through ``nvidia-ml-py`` where it
is installed, else ``nvidia-smi``'s CSV queries: both see every process on the
GPU, not only this one's.

How many GPUs a run has is ``gpu_count()``, the one count the plugin's GPU
skips and the perf tier's machine fingerprint both read: the GPUs that CUDA
would show this process, ``CUDA_VISIBLE_DEVICES`` honoured as CUDA reads it
(indices or UUID prefixes, in its order, up to the first it cannot match).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "GpuState",
    "device_sharing",
    "gpu_count",
    "gpu_states",
    "parse_smi",
    "release_problems",
    "visible",
    "visible_gpus",
]

#: GPU memory an executor may leave in use after shutdown() (another tenant's
#: allocations on a shared GPU move too): less than one CUDA context (~500 MiB).
SLACK_MIB = 256.0


@dataclass(frozen=True)
class GpuState:
    index: int
    uuid: str
    used_mib: float
    pids: frozenset[int]


def gpu_states() -> list[GpuState]:
    """Every GPU's memory in use and the processes computing on it; [] without GPUs or tools."""
    try:
        return _from_nvml()
    except Exception:  # noqa: BLE001 - nvidia-ml-py missing, or NVML failing: nvidia-smi may still answer
        return _from_smi()


def _from_nvml() -> list[GpuState]:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    try:
        states = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            used = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            states.append(GpuState(i, str(uuid), float(used), frozenset(int(p.pid) for p in procs)))
        return states
    finally:
        pynvml.nvmlShutdown()


def _smi(query: str, fields: str) -> str:
    out = subprocess.run(
        ["nvidia-smi", f"--query-{query}={fields}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return out.stdout if out.returncode == 0 else ""


def _from_smi() -> list[GpuState]:
    if shutil.which("nvidia-smi") is None:
        return []
    return parse_smi(_smi("gpu", "index,uuid,memory.used"), _smi("compute-apps", "gpu_uuid,pid"))


#: A GPU as ``nvidia-smi --query-gpu=index,uuid,name`` lists it.
ListedGpu = tuple[int, str, str]


def visible_gpus() -> list[str]:
    """The model names of the GPUs CUDA would show this process, in its order; [] without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listed = _listed(_smi("gpu", "index,uuid,name"))
    except (OSError, subprocess.SubprocessError):
        return []
    return [name for _, _, name in visible(listed, os.environ.get("CUDA_VISIBLE_DEVICES"))]


def gpu_count() -> int:
    """How many GPUs CUDA would show this process, found without initialising CUDA here."""
    return len(visible_gpus())


def _listed(csv: str) -> list[ListedGpu]:
    out = []
    for line in csv.splitlines():
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) == 3 and parts[0].isdigit():
            out.append((int(parts[0]), parts[1], parts[2]))
    return out


def visible(gpus: list[ListedGpu], cuda_visible_devices: str | None) -> list[ListedGpu]:
    """The GPUs of ``gpus`` that ``CUDA_VISIBLE_DEVICES`` leaves, in its order: each
    entry an index, a UUID's prefix, or a MIG instance's UUID (a device of its
    own); as CUDA does, the list ends at the first entry that matches no GPU,
    matches two, or repeats one (unset: every GPU)."""
    if cuda_visible_devices is None:
        return list(gpus)
    out: list[ListedGpu] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if entry.isdigit():
            match = [g for g in gpus if g[0] == int(entry)]
        elif entry.startswith("GPU-"):
            match = [g for g in gpus if g[1].startswith(entry)]
        elif entry.startswith("MIG-"):
            # A MIG instance is a device to CUDA; nvidia-smi lists the GPUs it is carved from.
            match = [(-1, entry, f"MIG instance {entry}")]
        else:
            match = []
        if len(match) != 1 or match[0] in out:
            break
        out.append(match[0])
    return out


def parse_smi(gpus_csv: str, apps_csv: str) -> list[GpuState]:
    """``nvidia-smi --query-gpu=index,uuid,memory.used`` and ``--query-compute-apps=gpu_uuid,pid``
    (``--format=csv,noheader,nounits``) as GpuStates."""
    pids: dict[str, set[int]] = {}
    for line in apps_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[1].isdigit():
            pids.setdefault(parts[0], set()).add(int(parts[1]))
    states = []
    for line in gpus_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        try:
            used = float(parts[2])
        except ValueError:
            continue  # "[N/A]"
        states.append(GpuState(int(parts[0]), parts[1], used, frozenset(pids.get(parts[1], ()))))
    return states


def release_problems(
    before: list[GpuState], pids: Iterable[int], timeout_s: float = 10.0, slack_mib: float = SLACK_MIB
) -> list[str]:
    """What still holds the GPUs ``timeout_s`` after an executor's shutdown: any of
    its processes ``pids`` computing on a GPU, and GPU memory in use above
    ``before`` (taken before it started) by more than ``slack_mib``. Empty once
    both are clear: polled, since a driver frees a dead process's memory a
    little after the process is gone."""
    ours = set(pids)
    deadline = time.monotonic() + timeout_s
    while True:
        problems = _problems(before, gpu_states(), ours, slack_mib)
        if not problems or time.monotonic() >= deadline:
            return problems
        time.sleep(0.2)


def _problems(before: list[GpuState], now: list[GpuState], ours: set[int], slack_mib: float) -> list[str]:
    was = {g.uuid: g for g in before}
    problems = []
    for g in now:
        held = sorted(g.pids & ours)
        if held:
            problems.append(f"pid {', '.join(map(str, held))} still computing on GPU {g.index} ({g.uuid})")
        if g.uuid in was and g.used_mib > was[g.uuid].used_mib + slack_mib:
            problems.append(
                f"GPU {g.index} ({g.uuid}) uses {g.used_mib:.0f} MiB, {g.used_mib - was[g.uuid].used_mib:.0f} MiB "
                f"more than before the executor started (allowed: {slack_mib:g} MiB)"
            )
    return problems


def device_sharing(devices: list[tuple[int, str]]) -> list[str]:
    """For (torch.cuda.current_device(), the device's UUID) per rank: each GPU that
    more than one rank computes on, with the ranks; empty when every rank has its own."""
    by_uuid: dict[str, list[int]] = {}
    for rank, (_, uuid) in enumerate(devices):
        by_uuid.setdefault(uuid, []).append(rank)
    return [
        f"ranks {', '.join(map(str, ranks))} all compute on GPU {uuid} "
        f"(cuda:{', cuda:'.join(str(devices[r][0]) for r in ranks)} in their processes)"
        for uuid, ranks in by_uuid.items()
        if len(ranks) > 1
    ]
