# -*- test-case-name: tests.nodes.test_fakes -*-
"""
What the node layer needs of node disks: :class:`IDisks`, implemented by
:class:`vmservice.storage.overlay.OverlayDisks` (and by the tests' fakes).
"""

from __future__ import annotations

from attrs import frozen
from zope.interface import Interface


@frozen
class DiskInfo:
    """
    What a node's disk is, as read from the file itself.

    :ivar path: the disk file.
    :ivar format: ``qcow2``, or ``raw`` for a file without a qcow2 header.
    :ivar size_bytes: the size the guest sees (a qcow2's virtual size).
    :ivar allocated_bytes: the space the file takes on the host.
    :ivar backing_file: the file a qcow2 overlay reads what it has not
        written from (the image's root file system), if it has one.
    """

    path: str
    format: str
    size_bytes: int
    allocated_bytes: int
    backing_file: str | None = None


class IDisks(Interface):
    """Creates and removes the root disks of nodes."""

    async def create(base: str, path: str, size_bytes: int) -> None:
        """
        Create the disk ``path`` over the image file ``base``, ``size_bytes``
        large.
        """

    def remove(path: str) -> bool:
        """Remove the disk ``path``; whether it is gone (removed now or never there)."""

    def info(path: str) -> DiskInfo | None:
        """
        What the disk ``path`` is, read from the file (blocking: call it off
        the reactor); ``None`` when there is no such file.
        """


__all__ = ["DiskInfo", "IDisks"]
