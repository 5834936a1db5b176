# -*- test-case-name: tests.hypervisors.qemu.test_cids -*-
"""
The AF_VSOCK context ids of this daemon's QEMUs (:class:`CidAllocator`), and
the file beside a VM's agent socket that says which one its QEMU runs with
(:func:`write_cid`, :func:`read_cid`).

Every start of a QEMU with a vhost-vsock device takes a CID of its own:
a boot, a restore, a fork's child and a warm clone are each a new QEMU, and
the guest re-reads its CID when the vsock transport is reset after the
state is loaded (its listener, bound to any CID, survives).  A CID is held
while its QEMU runs and released when it exits.  The kernel refuses a CID
that another VM of the host holds (QEMU then fails to start), so CIDs are
drawn at random from the whole 32-bit space rather than counted from 3,
where other VMMs on the host start theirs.  A QEMU adopted from an earlier run
of the daemon keeps its CID (its file is still there) without being held here:
a draw that met it (one chance in about four billion per running VM) would
fail that start, and the node's next start draws again.
"""

from __future__ import annotations

import os
import random
from typing import Callable, Optional

#: The lowest CID a guest may have (0 hypervisor, 1 loopback, 2 host).
FIRST_CID = 3
#: The highest (``0xffffffff`` is ``VMADDR_CID_ANY``).
LAST_CID = 0xFFFFFFFE
#: The file beside a VM's agent socket that holds its QEMU's CID.
CID_FILE = "agent.cid"


class CidAllocator:
    """
    CIDs for the QEMUs of this daemon, unique among those that run.

    :param draw: a number from ``FIRST_CID`` to ``LAST_CID`` (``random.randint``'s signature).
    """

    def __init__(self, draw: Callable[[int, int], int] = random.SystemRandom().randint) -> None:
        self._draw = draw
        self._held: set[int] = set()

    def allocate(self) -> int:
        """A CID no running QEMU of ours has; held until :meth:`release`."""
        while True:
            cid = self._draw(FIRST_CID, LAST_CID)
            if FIRST_CID <= cid <= LAST_CID and cid not in self._held:
                self._held.add(cid)
                return cid

    def release(self, cid: int) -> None:
        """Its QEMU exited: ``cid`` may be handed out again."""
        self._held.discard(cid)

    @property
    def held(self) -> frozenset[int]:
        """The CIDs held now."""
        return frozenset(self._held)


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


__all__ = ["CID_FILE", "FIRST_CID", "LAST_CID", "CidAllocator", "cid_path", "read_cid", "write_cid"]
