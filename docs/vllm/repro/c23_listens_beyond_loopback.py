"""C23, MultiprocExecutor and UniProcExecutor: on a machine whose host name
resolves to a non-loopback address (most servers), the caller's and the
workers' sockets listen on that address, not on loopback only. Where the host
name resolves to loopback, the script reruns itself in a private network
namespace (unshare, as root) whose /etc/hosts maps the host name to 192.0.2.1.
Usage: python c23_listens_beyond_loopback.py [mp|uni]"""

#: What it shows: (backend, clause) of the suite's report.
SHOWS = [('vllm-mp', 'C23'), ('vllm-uni', 'C23')]

import ipaddress
import os
import socket
import subprocess
import sys
import tempfile

from tiny import executor, verdict


def pid(worker):
    return os.getpid()


def listening_beyond_loopback(p):
    import psutil

    return [
        f"{c.laddr.ip}:{c.laddr.port}"
        for c in psutil.Process(p).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and not ipaddress.ip_address(c.laddr.ip).is_loopback
    ]


def host_address():
    return socket.gethostbyname(socket.gethostname())


if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "mp"
    if ipaddress.ip_address(host_address()).is_loopback and "IN_NETNS" not in os.environ:
        hosts = tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False)
        hosts.write(f"127.0.0.1 localhost\n192.0.2.1 {socket.gethostname()}\n")
        hosts.close()
        setup = f"ip link set lo up && ip addr add 192.0.2.1/24 dev lo && mount --bind {hosts.name} /etc/hosts && "
        print("the host name resolves to loopback here: rerunning in a network namespace where it does not", flush=True)
        done = subprocess.run(
            ["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c",
             setup + f'IN_NETNS=1 exec "{sys.executable}" "{__file__}" {backend}'],
        )
        os.unlink(hosts.name)
        sys.exit(done.returncode)
    print(f"host name {socket.gethostname()!r} resolves to {host_address()}", flush=True)
    ex = executor(tp=2 if backend == "mp" else 1, backend=backend)
    found = {p: listening_beyond_loopback(p) for p in {os.getpid(), *ex.collective_rpc(pid)}}
    found = {p: a for p, a in found.items() if a}
    ex.shutdown()
    print(f"{backend}: processes listening beyond loopback (pid: addresses):", found)
    verdict(bool(found), "a single-machine executor should listen on loopback only")
