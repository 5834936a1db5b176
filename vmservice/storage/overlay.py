# -*- test-case-name: tests.storage.test_overlay,tests.integration.storage.test_overlay -*-
"""
Per-node root disks: a qcow2 overlay on the image's raw ext4 base.

Writes land only in the overlay, so every node starts from the same base and
keeps what it writes across its own reboots; deleting the node deletes the
overlay.  The overlay's virtual size is the group's ``storage_size``; the
guest's init grows the file system to fill it.
"""

from __future__ import annotations

import os

from twisted.internet.interfaces import IReactorProcess
from twisted.internet.utils import getProcessOutputAndValue
from zope.interface import implementer

from .interfaces import IDisks


class StorageError(Exception):
    """A disk could not be created; the message says why."""


def overlay_command(qemu_img: str, base: str, path: str, size_bytes: int) -> list[str]:
    """
    The argv of ``qemu-img`` that creates the overlay (pure).

    :param qemu_img: the ``qemu-img`` program.
    :param base: the raw image the overlay is backed by.
    :param path: the overlay to create.
    :param size_bytes: the overlay's virtual size.
    """
    return [qemu_img, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", base, path, str(size_bytes)]


async def create_overlay(
    reactor: IReactorProcess, base: str, path: str, size_bytes: int, *, qemu_img: str = "qemu-img"
) -> None:
    """
    Create the qcow2 overlay ``path`` backed by the raw image ``base``.

    :param reactor: runs ``qemu-img``.
    :param base: the raw image (a symbolic link to it is resolved, so the
        overlay names the file itself).
    :param path: the overlay to create.
    :param size_bytes: the disk's virtual size; at least the base's size.
    :param qemu_img: the ``qemu-img`` program.
    :raise StorageError: when the size is too small or ``qemu-img`` fails.
    """
    base = os.path.realpath(base)
    base_size = os.path.getsize(base)
    if size_bytes < base_size:
        raise StorageError(
            f"storage_size {size_bytes} is smaller than the image ({base_size} bytes)"
        )
    argv = overlay_command(qemu_img, base, path, size_bytes)
    err: bytes
    code: int
    _, err, code = await getProcessOutputAndValue(
        argv[0], argv[1:], env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, reactor=reactor
    )
    if code != 0:
        raise StorageError(f"qemu-img failed ({code}): {err.decode(errors='replace').strip()}")


def remove_disk(path: str) -> bool:
    """
    Remove a node's disk.

    :param path: the disk file.
    :return: ``True`` when the disk is gone (removed now or never there).
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


@implementer(IDisks)
class OverlayDisks:
    """
    Node disks as qcow2 overlays (the fleet's disks).

    :param reactor: runs ``qemu-img``.
    :param qemu_img: the ``qemu-img`` program.
    """

    def __init__(self, reactor: IReactorProcess, qemu_img: str = "qemu-img") -> None:
        self._reactor = reactor
        self._qemu_img = qemu_img

    async def create(self, base: str, path: str, size_bytes: int) -> None:
        """Create the overlay ``path`` on ``base``, ``size_bytes`` large; see :func:`create_overlay`."""
        await create_overlay(self._reactor, base, path, size_bytes, qemu_img=self._qemu_img)

    def remove(self, path: str) -> bool:
        """Remove the disk ``path``; see :func:`remove_disk`."""
        return remove_disk(path)


__all__ = ["OverlayDisks", "StorageError", "create_overlay", "overlay_command", "remove_disk"]
