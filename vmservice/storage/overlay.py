# -*- test-case-name: tests.storage.test_overlay,tests.integration.storage.test_overlay -*-
"""
Per-node root disks: a qcow2 overlay on the image's raw ext4 base.

Writes land only in the overlay, so every node starts from the same base and
keeps what it writes across its own reboots; deleting the node deletes the
overlay.  The overlay's virtual size is the group's ``storage_size``; the
guest's init grows the file system to fill it.
"""

from __future__ import annotations

import errno
import os
import struct

from twisted.internet.interfaces import IReactorProcess
from twisted.internet.utils import getProcessOutputAndValue
from zope.interface import implementer

from .interfaces import DiskInfo, IDisks

#: The first bytes of every qcow2 file.
QCOW2_MAGIC = b"QFI\xfb"
#: The fields of a qcow2 header this module reads: magic, version, backing
#: file offset and length, cluster bits, virtual size (big-endian).
_QCOW2_HEADER = struct.Struct(">4sIQIIQ")
#: qcow2 limits a backing file name to this many bytes.
_MAX_BACKING_NAME = 1023


class StorageError(Exception):
    """A disk could not be created; the message says why."""


def overlay_command(qemu_img: str, base: str, path: str, size_bytes: int, base_format: str = "raw") -> list[str]:
    """
    The argv of ``qemu-img`` that creates the overlay (pure).

    :param qemu_img: the ``qemu-img`` program.
    :param base: the image the overlay is backed by.
    :param path: the overlay to create.
    :param size_bytes: the overlay's virtual size.
    :param base_format: ``raw`` (an image's root file system) or ``qcow2``
        (a template's frozen disk).
    """
    return [qemu_img, "create", "-q", "-f", "qcow2", "-F", base_format, "-b", base, path, str(size_bytes)]


async def create_overlay(
    reactor: IReactorProcess, base: str, path: str, size_bytes: int, *, qemu_img: str = "qemu-img"
) -> None:
    """
    Create the qcow2 overlay ``path`` backed by the image ``base``: raw, or
    qcow2 (a template's frozen disk, read from and never written).

    :param reactor: runs ``qemu-img``.
    :param base: the image (a symbolic link to it is resolved, so the
        overlay names the file itself).
    :param path: the overlay to create.
    :param size_bytes: the disk's virtual size; at least the base's size.
    :param qemu_img: the ``qemu-img`` program.
    :raise StorageError: when the size is too small or ``qemu-img`` fails.
    """
    base = os.path.realpath(base)
    info = disk_info(base)
    if info is None:
        raise FileNotFoundError(errno.ENOENT, "the base image is missing", base)
    if size_bytes < info.size_bytes:
        raise StorageError(
            f"storage_size {size_bytes} is smaller than the image ({info.size_bytes} bytes)"
        )
    argv = overlay_command(qemu_img, base, path, size_bytes, info.format)
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


def disk_info(path: str) -> DiskInfo | None:
    """
    What the disk ``path`` is: its qcow2 header read (format, virtual size,
    backing file), its allocation from ``stat``; a file without a qcow2
    header is ``raw`` of its own size.  Blocking.

    :return: ``None`` when there is no such file.
    """
    try:
        with open(path, "rb") as f:
            header = f.read(_QCOW2_HEADER.size)
            allocated = os.fstat(f.fileno()).st_blocks * 512
            if len(header) < _QCOW2_HEADER.size or not header.startswith(QCOW2_MAGIC):
                return DiskInfo(path, "raw", os.fstat(f.fileno()).st_size, allocated)
            _, _, backing_offset, backing_length, _, size = _QCOW2_HEADER.unpack(header)
            backing = None
            if backing_offset and 0 < backing_length <= _MAX_BACKING_NAME:
                f.seek(backing_offset)
                backing = f.read(backing_length).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    return DiskInfo(path, "qcow2", size, allocated, backing)


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

    def info(self, path: str) -> DiskInfo | None:
        """What the disk ``path`` is; see :func:`disk_info`."""
        return disk_info(path)


__all__ = ["QCOW2_MAGIC", "OverlayDisks", "StorageError", "create_overlay", "disk_info", "overlay_command", "remove_disk"]
