# -*- test-case-name: tests.hypervisors.qemu.test_cids -*-
"""
The file beside a VM's agent socket that holds the AF_VSOCK CID its VMM runs
with now (``agent.cid``): written by the driver at each start of a VM with a
vsock device and removed when it exits, read by the daemon's vsock endpoint
at each connect, and moved with a spare's other files at its hand-over.
"""

from __future__ import annotations

import os
from typing import Optional

#: The lowest CID a guest may have (0 hypervisor, 1 loopback, 2 host).
FIRST_CID = 3
#: The highest (``0xffffffff`` is ``VMADDR_CID_ANY``).
LAST_CID = 0xFFFFFFFE
#: The file beside a VM's agent socket that holds its CID.
CID_FILE = "agent.cid"


def cid_path(agent_socket: str) -> str:
    """The CID file of the VM whose agent socket is ``agent_socket``."""
    return os.path.join(os.path.dirname(agent_socket), CID_FILE)


def write_cid(agent_socket: str, cid: Optional[int]) -> None:
    """Record the CID the VM of ``agent_socket`` runs with (0600), or remove the record (``None``)."""
    path = cid_path(agent_socket)
    if cid is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    temporary = path + ".new"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{cid}\n")
    os.replace(temporary, path)


def read_cid(agent_socket: str) -> Optional[int]:
    """The CID the VM of ``agent_socket`` runs with, or ``None`` (no vsock device, or not started)."""
    try:
        with open(cid_path(agent_socket)) as f:
            text = f.read(32).strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    cid = int(text)
    return cid if FIRST_CID <= cid <= LAST_CID else None


__all__ = ["CID_FILE", "FIRST_CID", "LAST_CID", "cid_path", "read_cid", "write_cid"]
