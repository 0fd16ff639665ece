"""What the GPUs hold, as the GPU tier reads it (``harness.system.gpus``), from nvidia-smi's CSV."""

from __future__ import annotations

import sys

import pytest

from harness.system import gpus
from harness.system.gpus import GpuState

GPUS = "0, GPU-aaa, 1200\n1, GPU-bbb, 3\n"
APPS = "GPU-aaa, 4242\nGPU-aaa, 4243\n"


def test_nvidia_smi_csv_gives_each_gpus_memory_and_processes() -> None:
    assert gpus.parse_smi(GPUS, APPS) == [
        GpuState(0, "GPU-aaa", 1200.0, frozenset({4242, 4243})),
        GpuState(1, "GPU-bbb", 3.0, frozenset()),
    ]


def test_lines_nvidia_smi_cannot_fill_in_are_left_out_not_guessed() -> None:
    assert gpus.parse_smi("0, GPU-aaa, [N/A]\nNo devices were found\n", "[Not Supported], 12\n") == []


def test_a_process_of_the_executor_still_on_a_gpu_is_named_with_the_gpu() -> None:
    before = [GpuState(0, "GPU-aaa", 100.0, frozenset())]
    now = [GpuState(0, "GPU-aaa", 150.0, frozenset({4242, 999}))]
    assert gpus._problems(before, now, {4242}, 256) == ["pid 4242 still computing on GPU 0 (GPU-aaa)"]


def test_memory_not_given_back_is_named_with_how_much() -> None:
    before = [GpuState(0, "GPU-aaa", 100.0, frozenset()), GpuState(1, "GPU-bbb", 100.0, frozenset())]
    now = [GpuState(0, "GPU-aaa", 900.0, frozenset()), GpuState(1, "GPU-bbb", 300.0, frozenset())]
    assert gpus._problems(before, now, set(), 256) == [
        "GPU 0 (GPU-aaa) uses 900 MiB, 800 MiB more than before the executor started (allowed: 256 MiB)"
    ]


def test_release_is_polled_until_the_driver_has_freed_the_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([[GpuState(0, "GPU-aaa", 900.0, frozenset({7}))], [GpuState(0, "GPU-aaa", 100.0, frozenset())]])
    monkeypatch.setattr(gpus, "gpu_states", lambda: next(readings))
    assert gpus.release_problems([GpuState(0, "GPU-aaa", 100.0, frozenset())], {7}, timeout_s=5) == []


def test_ranks_on_one_gpu_are_named_with_the_device_each_sees() -> None:
    assert gpus.device_sharing([(0, "GPU-aaa"), (1, "GPU-bbb")]) == []
    assert gpus.device_sharing([(0, "GPU-aaa"), (0, "GPU-aaa"), (1, "GPU-bbb")]) == [
        "ranks 0, 1 all compute on GPU GPU-aaa (cuda:0, cuda:0 in their processes)"
    ]


def test_no_gpu_and_no_tools_is_an_empty_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert gpus.gpu_states() == []


LISTED = [(0, "GPU-aaa1", "NVIDIA H100"), (1, "GPU-bbb2", "NVIDIA H100"), (2, "GPU-abc3", "NVIDIA H200")]


@pytest.mark.parametrize(
    "cuda_visible_devices, indices",
    [
        (None, [0, 1, 2]),
        ("", []),
        ("2,0", [2, 0]),
        ("GPU-bbb,0", [1, 0]),
        ("1,7,0", [1]),  # no GPU 7: CUDA stops there
        ("GPU-a", []),  # the prefix of two GPUs' UUIDs
        ("0,0,1", [0]),  # a repeat ends the list
        ("0, 2", [0, 2]),
        ("MIG-x", [-1]),  # a MIG instance: a device of its own, on a GPU nvidia-smi lists
        ("MIG-x,MIG-y", [-1, -1]),
        ("nonsense,0", []),
    ],
)
def test_the_visible_gpus_are_those_cuda_visible_devices_leaves_in_its_order(
    cuda_visible_devices: str | None, indices: list[int]
) -> None:
    assert [g[0] for g in gpus.visible(LISTED, cuda_visible_devices)] == indices


def test_the_gpu_count_is_the_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "_smi", lambda query, fields: "0, GPU-aaa1, NVIDIA H100\n1, GPU-bbb2, NVIDIA H100\n")
    monkeypatch.setattr(gpus.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpus.gpu_count() == 1
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpus.gpu_count() == 2
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    assert gpus.gpu_count() == 0
