# -*- test-case-name: tests.nodes.test_fakes -*-
"""
What the node layer needs of node disks: :class:`IDisks`, implemented by
:class:`vmservice.storage.overlay.OverlayDisks` (and by the tests' fakes).
"""

from __future__ import annotations

from zope.interface import Interface


class IDisks(Interface):
    """Creates and removes the root disks of nodes."""

    async def create(base: str, path: str, size_bytes: int) -> None:
        """
        Create the disk ``path`` over the image file ``base``, ``size_bytes``
        large.
        """

    def remove(path: str) -> bool:
        """Remove the disk ``path``; whether it is gone (removed now or never there)."""


__all__ = ["IDisks"]
