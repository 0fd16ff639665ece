"""What a process holds, and how to look at it: its processes, threads,
shared-memory segments, semaphores, sockets and temporary files (``leaks``),
what a test's processes left and its removal (``leftovers``), its GPUs (``gpus``), its
stacks at a hang (``stacks``), its environment (``environ``), which modules
it can import (``modules``), how busy the machine is and how far the suite's
own waits stretch with it (``load``), simulated nodes in network namespaces
behind a private bridge (``nodes``), a test process joining their world
(``world``), a worker's pid as the caller sees it (``pids``), a signal from the kernel when a
process's parent dies (``parent_death``), a process's growth per 1,000 calls
(``growth``), whether a process has exited, from /proc (``processes``),
whether an output file can be written (``paths``); and the reaper (``reaper``), the process that
ends what a dying test run leaves behind (it runs as ``python -m``, so it
lives where no ``__init__.py`` imports it before runpy does).

The ground floor, beside ``harness.contract``: it may import nothing of harness's.
"""
