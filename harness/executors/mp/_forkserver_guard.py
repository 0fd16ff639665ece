"""Imported in Python's fork server only (``mp`` names it in the server's preload
list when the server is started from the caller's main thread): the kernel
SIGKILLs the fork server the moment its caller dies (C13).

Left to itself, a fork server whose caller died exits through a normal
interpreter shutdown with torch loaded: seconds on a quiet machine, past C13's
10 s on a busy one. The death signal is tied to the thread that started the
server, hence the main thread only: a server started from a thread that ends
before the process would otherwise die with that thread, taking live workers
along.
"""

from __future__ import annotations

import os

from harness.system.parent_death import signal_on_parent_death


def _die_with_the_caller() -> None:
    parent = os.getppid()
    if not signal_on_parent_death():
        return
    if os.getppid() != parent:  # the caller died before the signal was armed
        os._exit(0)


_die_with_the_caller()
