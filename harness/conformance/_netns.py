"""C23 where the host name does not resolve to loopback: the same look, in a private network namespace.

Where this machine's host name resolves to 127.0.0.1, a backend that leaves its
transport unpinned (gloo without ``GLOO_SOCKET_IFNAME`` binds to whatever the
host name resolves to) listens on loopback only by luck, and C23 passes. So the
check runs a second time in a network namespace of its own (``unshare --net
--mount``, as root or with a user namespace) holding a documentation address,
with a private ``/etc/hosts`` (bind-mounted, visible to nothing outside) that
maps the host name to that address. The namespace and its mount disappear with
their last process; the test kills whatever is left of the caller's tag.

Run as ``python -m harness.conformance._netns BACKEND WORLD_SIZE START_METHOD RESULT_FILE``
(by :func:`run`, under ``unshare``); the result goes to a file, written whole.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import ExecutorConfig, load_backend
from harness.conformance._exposure import Exposure, examine
from harness.system import leaks

__all__ = ["ADDRESS", "NetnsRun", "host_resolution", "run", "unavailable"]

#: TEST-NET-1 (RFC 5737): not loopback, routed nowhere.
ADDRESS = "192.0.2.1"
_PREFIX = 24


@dataclass
class NetnsRun:
    """What became of the namespace variant: ``exposure`` if it ran; else why not
    (``unavailable``: the platform does not allow it; ``error``: the executor failed there)."""

    exposure: Exposure | None = None
    where: str = ""
    unavailable: str = ""
    error: str = ""


def host_resolution() -> str:
    """``host name 'x' resolves to a, b``, for the report."""
    name = socket.gethostname()
    try:
        addresses = sorted({str(info[4][0]) for info in socket.getaddrinfo(name, None)})
    except OSError as exc:
        return f"host name {name!r} does not resolve ({exc})"
    return f"host name {name!r} resolves to {', '.join(addresses)}"


def _unshare_command() -> tuple[list[str], str]:
    """The command prefix, or why there is none."""
    if not sys.platform.startswith("linux"):
        return [], f"network namespaces are Linux's ({sys.platform} here)"
    missing = [tool for tool in ("unshare", "ip", "mount") if shutil.which(tool) is None]
    if missing:
        return [], f"{', '.join(missing)} not found"
    command = ["unshare", "--net", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        command.append("--map-root-user")  # a user namespace: root there, if the kernel allows it
    return command, ""


def unavailable() -> str:
    """Why a network namespace cannot be made here, or "" if it can (tried, not guessed)."""
    prefix, reason = _unshare_command()
    if not prefix:
        return reason
    try:
        done = subprocess.run([*prefix, "--", "true"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(prefix)}: {exc}"
    return "" if done.returncode == 0 else f"{' '.join(prefix)} failed: {done.stderr.strip()[-300:]}"


def run(backend: str, config: ExecutorConfig, work_dir: Path, deadline_s: float) -> NetnsRun:
    """C23's look at ``backend`` in a network namespace of its own; bounded by ``deadline_s``."""
    prefix, reason = _unshare_command()
    if not prefix:
        return NetnsRun(unavailable=reason)
    result = work_dir / "netns-result.json"
    log = work_dir / "netns-driver.log"
    tag = leaks.new_tag()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **{leaks.TAG_ENV: tag})
    argv = [sys.executable, "-m", "harness.conformance._netns", backend, str(config.world_size)]
    argv += [config.start_method, str(result)]
    with open(log, "wb") as out:
        driver = subprocess.Popen([*prefix, "--", *argv], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            driver.wait(timeout=deadline_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            driver.kill()
            driver.wait(timeout=30)
            _kill_tagged(tag)
    tail = log.read_text(errors="replace")[-2000:]
    if not result.exists():
        if timed_out:
            return NetnsRun(error=f"the namespace's caller did not finish within {deadline_s:g} s:\n{tail}")
        return NetnsRun(unavailable=f"{' '.join(prefix)} failed (exit {driver.returncode}): {tail.strip()[-500:]}")
    return _outcome(json.loads(result.read_text()), tail, timed_out, deadline_s)


def _outcome(data: dict[str, Any], tail: str, timed_out: bool, deadline_s: float) -> NetnsRun:
    if "unavailable" in data:
        return NetnsRun(unavailable=data["unavailable"])
    where = data["where"]
    if timed_out:
        return NetnsRun(where=where, error=f"did not finish within {deadline_s:g} s")
    if "error" in data:
        return NetnsRun(where=where, error=f"{data['error']}\n--- the namespace's caller's output ---\n{tail}")
    return NetnsRun(Exposure.from_json(data["exposure"]), where)


def _kill_tagged(tag: str) -> None:
    """Whatever the namespace's caller left (its namespace ends with them)."""
    deadline = time.monotonic() + 10
    while (left := leaks.tagged(tag)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)


# ---- inside the namespace ------------------------------------------------------


def _sh(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {(done.stderr or done.stdout).strip()}")


def _set_up(hosts_dir: str) -> str:
    """Give the namespace a non-loopback address the host name resolves to; say where."""
    _sh("ip", "link", "set", "lo", "up")
    device = "harness0"
    try:
        _sh("ip", "link", "add", device, "type", "dummy")
        _sh("ip", "link", "set", device, "up")
    except OSError:
        device = "lo"  # no dummy interfaces here: an extra address on loopback's interface is as good
    _sh("ip", "addr", "add", f"{ADDRESS}/{_PREFIX}", "dev", device)
    name = socket.gethostname()
    hosts = os.path.join(hosts_dir, "hosts")
    with open(hosts, "w", encoding="utf-8") as f:
        f.write(f"127.0.0.1 localhost\n::1 localhost\n{ADDRESS} {name}\n")
    _sh("mount", "--bind", hosts, "/etc/hosts")
    resolved = sorted({str(info[4][0]) for info in socket.getaddrinfo(name, None)})
    if resolved != [ADDRESS]:
        raise OSError(f"host name {name!r} resolves to {resolved} despite the namespace's /etc/hosts")
    return f"host name {name!r} resolves to {ADDRESS}, an address on {device}"


def _write(path: str, data: dict[str, object]) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def main() -> None:
    spec, world_size, start_method, result = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with tempfile.TemporaryDirectory(prefix="harness-netns-") as hosts_dir:
        try:
            where = _set_up(hosts_dir)
        except (OSError, subprocess.SubprocessError) as exc:
            _write(result, {"unavailable": f"could not set the namespace up: {exc}"})
            return
        tag = os.environ.get(leaks.TAG_ENV) or leaks.tag()
        try:
            found = examine(load_backend(spec).factory, ExecutorConfig(world_size, start_method=start_method), tag)
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with it
            _write(result, {"where": where, "error": f"{type(exc).__name__}: {exc}"})
            return
        _write(result, {"where": where, "exposure": found.to_json()})


if __name__ == "__main__":
    main()
