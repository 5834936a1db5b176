# -*- test-case-name: tests.devcluster.test_ports -*-
"""
The control plane's loopback ports and node names, as the command line gives them.

``--ports auto`` takes free ports the kernel hands out; ``--ports BASE`` takes BASE, BASE+1, ... in the
order of :class:`Ports` (``make cluster`` uses :data:`DEFAULT_BASE`: 16443 to 16447, clear of a real
install's 6443, 2379-2380, 10250 and 10257-10259). ``--nodes`` names the hosts that get an identity.
"""

from __future__ import annotations

import re
import socket
from typing import Callable

from attrs import astuple, fields, frozen

__all__ = ["DEFAULT_BASE", "DEFAULT_NODES", "LOOPBACK", "MAX_NODES", "Ports", "free_ports", "parse_nodes",
           "parse_ports", "ports_from_base", "ports_in_use"]

LOOPBACK = "127.0.0.1"

#: The first port of ``make cluster``'s control plane.
DEFAULT_BASE = 16443

#: The hosts that get an identity unless ``--nodes`` says otherwise.
DEFAULT_NODES = "vms-a,vms-b"

#: At most this many node names (enough for a scale benchmark's simulated hosts).
MAX_NODES = 1000

# A node's name is a DNS subdomain (what the API server accepts as a Node's name).
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_NODE_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\Z")


@frozen
class Ports:
    """The loopback ports of one control plane, in the order ``--ports BASE`` numbers them."""

    apiserver: int
    etcd_client: int
    etcd_peer: int
    scheduler: int
    controller_manager: int


def parse_ports(text: str) -> int | None:
    """
    The first port of ``--ports BASE``, or ``None`` for ``auto``.

    :raise ValueError: neither ``auto`` nor a number leaving room for every port in 1024-65535.
    """
    if text == "auto":
        return None
    count = len(fields(Ports))
    if not re.fullmatch(r"[0-9]{1,5}", text) or not 1024 <= int(text) <= 65536 - count:
        raise ValueError(f"--ports takes 'auto' or a first port from 1024 to {65536 - count}, not {text!r}")
    return int(text)


def ports_from_base(base: int) -> Ports:
    """The ports ``base``, ``base + 1``, ... in the order of :class:`Ports`."""
    return Ports(*range(base, base + len(fields(Ports))))


def parse_nodes(text: str) -> tuple[str, ...]:
    """
    The node names of ``--nodes NAME,NAME,...`` in their order.

    :raise ValueError: none, too many, one twice, or one that is not a DNS subdomain (lower case letters,
        digits, ``-`` and ``.``, at most 253 characters).
    """
    names = tuple(text.split(","))
    if len(names) > MAX_NODES:
        raise ValueError(f"--nodes takes at most {MAX_NODES} names, not {len(names)}")
    for name in names:
        if len(name) > 253 or not _NODE_NAME.match(name):
            raise ValueError(f"--nodes: {name[:80]!r} is no node name (a DNS subdomain: a-z, 0-9, '-', '.')")
    if len(set(names)) != len(names):
        raise ValueError("--nodes names a node twice")
    return names


def free_ports(make_socket: Callable[[], socket.socket] = socket.socket) -> Ports:
    """Ports the kernel hands out on loopback now (each socket held until all are chosen, so they differ)."""
    sockets = [make_socket() for _ in fields(Ports)]
    try:
        for each in sockets:
            each.bind((LOOPBACK, 0))
        return Ports(*(each.getsockname()[1] for each in sockets))
    finally:
        for each in sockets:
            each.close()


def ports_in_use(ports: Ports, make_socket: Callable[[], socket.socket] = socket.socket) -> list[int]:
    """The ports of ``ports`` something holds on loopback already."""
    busy = []
    for port in astuple(ports):
        with make_socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the control plane's listeners do
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                busy.append(port)
    return busy
