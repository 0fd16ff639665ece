"""What a process holds, and how to look at it: its processes, threads,
shared-memory segments and sockets (``leaks``), its GPUs (``gpus``), its
stacks at a hang (``stacks``), its environment (``environ``), and which
modules it can import (``modules``).

The ground floor beside ``harness.contract``: it imports nothing of harness's.
"""
