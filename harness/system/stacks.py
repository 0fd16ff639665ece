"""Stacks of a hung test: every Python process in its tree, workers included.

Hangs are usually in the workers, not in the test process. At a timeout the
plugin asks, for each process of the test's group:

- ``py-spy dump`` where py-spy is installed (any Python process, no
  co-operation needed);
- else a faulthandler signal (SIGUSR1) to the processes that catch it: the
  test process and the workers of the built-in backends register one
  (:func:`register_from_env`) that writes into the test's stacks folder,
  named by ``HARNESS_STACKS_DIR``.

A process that gives no stacks either way is listed as such.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import signal
import subprocess
import time
from typing import IO

__all__ = ["STACKS_DIR_ENV", "collect", "register", "register_from_env"]

STACKS_DIR_ENV = "HARNESS_STACKS_DIR"
_SIGNAL = signal.SIGUSR1
_PY_SPY_S = 10.0
_dump_files: list[IO[str]] = []  # kept open for the process's life: faulthandler writes to them


def register(stacks_dir: str) -> None:
    """Dump this process's stacks into ``stacks_dir`` on SIGUSR1."""
    dump = open(os.path.join(stacks_dir, f"stacks-{os.getpid()}.txt"), "w", encoding="utf-8")  # noqa: SIM115
    _dump_files.append(dump)
    faulthandler.register(_SIGNAL, file=dump, all_threads=True)


def register_from_env() -> None:
    """In a worker process (public as ``harness.register_stacks``): dump this
    process's stacks on SIGUSR1 into the folder the suite names in
    ``HARNESS_STACKS_DIR``, so that they reach the report at a timeout; nothing
    where it is unset."""
    stacks_dir = os.environ.get(STACKS_DIR_ENV)
    if stacks_dir and os.path.isdir(stacks_dir):
        with contextlib.suppress(OSError, RuntimeError):
            register(stacks_dir)


def _catches(pid: int, signum: int) -> bool:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    return False


def _name(pid: int) -> str:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    return "?"


def collect(pids: list[int], stacks_dir: str) -> str:
    """The stacks of ``pids`` (the test's process group), as one text."""
    parts: list[str] = []
    py_spy = shutil.which("py-spy")
    silent: list[int] = []
    if py_spy:
        deadline = time.monotonic() + 3 * _PY_SPY_S
        for pid in pids:
            budget = min(_PY_SPY_S, deadline - time.monotonic())
            try:
                done = subprocess.run(
                    [py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=budget, check=False
                )
            except (OSError, subprocess.SubprocessError, ValueError):
                silent.append(pid)
                continue
            if done.returncode == 0 and done.stdout.strip():
                parts.append(f"--- process {pid} ({_name(pid)}), by py-spy:\n{done.stdout.rstrip()}")
            else:
                silent.append(pid)
    else:
        signalled = [pid for pid in pids if _catches(pid, _SIGNAL)]
        for pid in signalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, _SIGNAL)
        silent = [pid for pid in pids if pid not in signalled]
        if signalled:
            time.sleep(1.0)  # time to write them
    for entry in sorted(os.listdir(stacks_dir)) if os.path.isdir(stacks_dir) else []:
        with open(os.path.join(stacks_dir, entry), encoding="utf-8", errors="replace") as f:
            text = f.read().strip()
        pid_text = entry.removeprefix("stacks-").removesuffix(".txt")
        if text:
            parts.append(f"--- process {pid_text}:\n{text}")
    if silent:
        how = "py-spy could not read them" if py_spy else "no faulthandler signal, and py-spy is not installed"
        parts.append("--- no stacks (" + how + ") from: " + ", ".join(f"{p} ({_name(p)})" for p in silent))
    return "\n".join(parts)
