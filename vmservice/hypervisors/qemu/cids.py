# -*- test-case-name: tests.hypervisors.qemu.test_cids -*-
"""
The AF_VSOCK context ids of this daemon's QEMUs (:class:`CidAllocator`); the
file that says which one a VM runs with is :mod:`vmservice.hypervisors.cid_file`.

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

import random
from typing import Callable

from ..cid_file import FIRST_CID, LAST_CID


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


__all__ = ["FIRST_CID", "LAST_CID", "CidAllocator"]
