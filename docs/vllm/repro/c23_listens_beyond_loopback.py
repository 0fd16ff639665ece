"""C23, MultiprocExecutor and UniProcExecutor: on a single machine, the caller's
and the workers' sockets listen on the host's address, not only on loopback.
Usage: python c23_listens_beyond_loopback.py [mp|uni]"""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C23'), ('vllm-uni', 'C23')]

import ipaddress
import os
import sys

import psutil

from tiny import executor, verdict


def pid(worker):
    return os.getpid()


def listening_beyond_loopback(p):
    out = []
    for c in psutil.Process(p).net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and not ipaddress.ip_address(c.laddr.ip).is_loopback:
            out.append(f"{c.laddr.ip}:{c.laddr.port}")
    return out


if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "mp"
    ex = executor(tp=2 if backend == "mp" else 1, backend=backend)
    found = {p: listening_beyond_loopback(p) for p in {os.getpid(), *ex.collective_rpc(pid)}}
    found = {p: a for p, a in found.items() if a}
    ex.shutdown()
    print(f"{backend}: processes listening beyond loopback (pid: addresses):", found)
    verdict(bool(found), "a single-machine executor should listen on loopback only")
