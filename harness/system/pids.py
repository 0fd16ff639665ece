"""A process's pid as this process sees it, from the pid it knows itself by.

A worker reports ``os.getpid()``: its pid in its own PID namespace. On a
simulated node that namespace is the node's, and the same number names another
process here, or none. So it reports its PID namespace too (the namespace's
inode, the same from everywhere), and this module finds the process in
``/proc`` by both: the last pid of its ``NSpid`` line is the one it knows::

    worker on a node: (pid 12, namespace 4026532871) ──► /proc/*: ns/pid == 4026532871
                                                          and NSpid "… 31807 12" ──► 31807

A process of another machine (a real cluster's node) is in no ``/proc`` here: None.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["pid_namespace", "visible"]


def pid_namespace() -> int:
    """This process's PID namespace (its inode), or 0 where it cannot be told."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def visible(pid: int, namespace: int) -> int | None:
    """The pid, as this process sees it, of the process that knows itself as
    ``pid`` in the PID namespace ``namespace`` (0: unknown, taken as this
    process's own); None where no such process is in sight."""
    if namespace in (0, pid_namespace()):
        return pid
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            if os.stat(f"/proc/{entry}/ns/pid").st_ino != namespace:
                continue
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        if int(line.split()[-1]) == pid:
                            return int(entry)
                        break
    return None
