"""harness.system.sockets: what a process listens on, read from its own network's tables."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import psutil
import pytest

from harness.system.sockets import bound_sockets


def test_listening_and_bound_sockets_are_found_with_their_addresses_and_others_are_not() -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as loop,
        socket.socket(socket.AF_INET6) as every,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
        socket.socket() as unbound,
    ):
        every.bind(("::", 0))
        every.listen()
        udp.bind(("0.0.0.0", 0))
        found = set(bound_sockets(os.getpid()))
        assert ("127.0.0.1", loop.getsockname()[1]) in found
        assert ("::", every.getsockname()[1]) in found
        assert ("0.0.0.0", udp.getsockname()[1]) in found
        assert all(port != 0 for _, port in found), found
        assert unbound.fileno() > 0  # a socket neither bound nor listening is in no row


def test_an_ipv4_mapped_address_reads_as_ss_writes_it() -> None:
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::ffff:127.0.0.1", 0))
        s.listen()
        assert ("::ffff:127.0.0.1", s.getsockname()[1]) in bound_sockets(os.getpid())


# Not harness.system.nodes.unavailable_reason: this Python runs in the host's
# mount namespace, in sight wherever it lies (under /tmp too, which hides it from nodes).
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare for a network namespace"
)
def test_a_process_in_another_network_namespace_shows_its_own_sockets() -> None:
    """psutil reads the reader's /proc/net and sees nothing of such a process."""
    code = (
        "import socket, time; s = socket.create_server(('0.0.0.0', 0)); "
        "print(s.getsockname()[1], flush=True); time.sleep(60)"
    )
    with subprocess.Popen(["unshare", "--net", sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            assert ("0.0.0.0", port) in bound_sockets(proc.pid)  # unshare execs Python in its place
            assert ("0.0.0.0", port) not in {
                (c.laddr.ip, c.laddr.port) for c in psutil.Process(proc.pid).net_connections()
            }
        finally:
            proc.kill()
