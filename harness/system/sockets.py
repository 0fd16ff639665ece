"""The sockets a process listens on, read from its own network's ``/proc`` tables.

psutil reads ``/proc/net/*``: the tables of the *reader's* network namespace,
so a process on a simulated node (a namespace of its own) shows no socket
there. This module reads ``/proc/<pid>/net/*`` (the process's own network)
and keeps the rows whose inode is one of the process's descriptors::

    /proc/<pid>/fd/*  ──► socket:[inode] ──┐
    /proc/<pid>/net/tcp, tcp6, udp, udp6 ──┴─► rows of those inodes: LISTEN (tcp), bound (udp)
"""

from __future__ import annotations

import ipaddress
import os

__all__ = ["bound_sockets"]

#: /proc/net/tcp's state of a listening socket (include/net/tcp_states.h).
_TCP_LISTEN = "0A"
_TABLES = (("tcp", 4), ("tcp6", 6), ("udp", 4), ("udp6", 6))


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            out.add(target[len("socket:[") : -1])
    return out


def _address(hex_address: str, version: int) -> str:
    """``0100007F`` -> ``127.0.0.1``: /proc prints each 32-bit word in host
    (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if version == 4:
        return str(ipaddress.IPv4Address(words))
    v6 = ipaddress.IPv6Address(words)
    # As psutil and ss write it (Python before 3.13 writes ::ffff:7f00:1).
    return f"::ffff:{v6.ipv4_mapped}" if v6.ipv4_mapped is not None else str(v6)


def bound_sockets(pid: int) -> list[tuple[str, int]]:
    """(address, port) of each TCP socket ``pid`` listens on and each UDP socket
    it has bound, in the process's own network namespace. Raises OSError where
    the process is gone or not ours to read."""
    inodes = _socket_inodes(pid)
    out = []
    for table, version in _TABLES:
        try:
            with open(f"/proc/{pid}/net/{table}", encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:  # no IPv6 here
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if inode not in inodes or (table.startswith("tcp") and state != _TCP_LISTEN):
                continue
            address, port = local.rsplit(":", 1)
            if table.startswith("udp") and int(port, 16) == 0:
                continue  # not bound
            out.append((_address(address, version), int(port, 16)))
    return out
