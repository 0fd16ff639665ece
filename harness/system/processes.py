"""A process's state as the kernel shows it in /proc: light enough for the
reaper process, which imports nothing beyond the standard library."""

from __future__ import annotations

__all__ = ["is_zombie"]


def is_zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits to be reaped; a process that is gone
    altogether counts as one too (it holds nothing any more)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return True
    # "pid (command) state ...": the command may hold spaces and parentheses.
    return stat[stat.rindex(")") + 2 : stat.rindex(")") + 3] == "Z"
