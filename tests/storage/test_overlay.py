# -*- test-case-name: tests.storage.test_overlay -*-
"""
Tests for :mod:`vmservice.storage.overlay` on a reactor that records
``qemu-img`` instead of running it: the command line, the size check, the
error of a failed ``qemu-img``, and the removal of disks.  ``qemu-img``
itself runs in :mod:`tests.integration.storage.test_overlay`.
"""

from __future__ import annotations

import os
import struct

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.processes import ProcessReactor
from vmservice.storage.interfaces import DiskInfo
from vmservice.storage.overlay import (
    QCOW2_MAGIC,
    OverlayDisks,
    StorageError,
    create_overlay,
    disk_info,
    overlay_command,
    remove_disk,
)

GiB = 1 << 30


class OverlayCommandTests(SynchronousTestCase):
    """:func:`overlay_command`."""

    def test_command(self) -> None:
        """A quiet qcow2 overlay on a raw backing file, of the given size in bytes."""
        self.assertEqual(
            overlay_command("qemu-img", "/img/rootfs.ext4", "/s/demo-1/disk.qcow2", 2 * GiB),
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", "/img/rootfs.ext4",
             "/s/demo-1/disk.qcow2", "2147483648"],
        )


class CreateOverlayTests(SynchronousTestCase):
    """:func:`create_overlay` and :class:`OverlayDisks` with ``qemu-img`` recorded."""

    def setUp(self) -> None:
        self.reactor = ProcessReactor()
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        self.base = os.path.join(directory, "rootfs.ext4")
        with open(self.base, "wb") as f:
            f.truncate(1 << 20)
        self.link = os.path.join(directory, "current")
        os.symlink("rootfs.ext4", self.link)
        self.disk = os.path.join(directory, "disk.qcow2")

    def test_runs_qemu_img_on_the_real_base(self) -> None:
        """qemu-img runs with the overlay command on the file the base links to, and a PATH only."""
        d = Deferred.fromCoroutine(create_overlay(self.reactor, self.link, self.disk, 2 * GiB, qemu_img="/q/qemu-img"))
        [(_, argv, _)] = self.reactor.spawned
        self.assertEqual(argv, overlay_command("/q/qemu-img", self.base, self.disk, 2 * GiB))
        self.assertEqual(list(self.reactor.environments[0] or {}), ["PATH"])
        self.assertNoResult(d)
        self.reactor.transports[0].end(0)
        self.assertIsNone(self.successResultOf(d))

    def test_qemu_img_fails(self) -> None:
        """A failing qemu-img fails the creation with its exit status and error output."""
        d = Deferred.fromCoroutine(create_overlay(self.reactor, self.base, self.disk, 2 * GiB))
        self.reactor.transports[0].end(1, err=b"qemu-img: disk.qcow2: Permission denied\n")
        error = self.failureResultOf(d, StorageError).value
        self.assertEqual(str(error), "qemu-img failed (1): qemu-img: disk.qcow2: Permission denied")

    def test_smaller_than_the_image(self) -> None:
        """A size below the base image's is refused before anything runs."""
        d = Deferred.fromCoroutine(create_overlay(self.reactor, self.base, self.disk, 1000))
        error = self.failureResultOf(d, StorageError).value
        self.assertEqual(str(error), f"storage_size 1000 is smaller than the image ({1 << 20} bytes)")
        self.assertEqual(self.reactor.spawned, [])

    def test_missing_base(self) -> None:
        """A base image that does not exist fails with the OSError, before anything runs."""
        d = Deferred.fromCoroutine(create_overlay(self.reactor, self.base + ".gone", self.disk, 2 * GiB))
        self.failureResultOf(d, FileNotFoundError)
        self.assertEqual(self.reactor.spawned, [])

    def test_overlay_disks(self) -> None:
        """OverlayDisks creates through qemu-img (its own program) and removes the file."""
        disks = OverlayDisks(self.reactor, qemu_img="/q/qemu-img")
        d = Deferred.fromCoroutine(disks.create(self.base, self.disk, 2 * GiB))
        self.assertEqual(self.reactor.spawned[0][1], overlay_command("/q/qemu-img", self.base, self.disk, 2 * GiB))
        self.reactor.transports[0].end(0)
        self.successResultOf(d)
        open(self.disk, "wb").close()
        self.assertTrue(disks.remove(self.disk))
        self.assertFalse(os.path.exists(self.disk))


class RemoveDiskTests(SynchronousTestCase):
    """:func:`remove_disk`."""

    def test_removed(self) -> None:
        """An existing disk is removed."""
        path = self.mktemp()
        open(path, "wb").close()
        self.assertTrue(remove_disk(path))
        self.assertFalse(os.path.exists(path))

    def test_never_there(self) -> None:
        """A disk that does not exist is gone already."""
        self.assertTrue(remove_disk(self.mktemp()))

    def test_cannot_remove(self) -> None:
        """A path that cannot be unlinked (here a directory) is reported as not gone, and stays."""
        path = self.mktemp()
        os.mkdir(path)
        self.assertFalse(remove_disk(path))
        self.assertTrue(os.path.isdir(path))


def _qcow2_header(size: int, backing: bytes = b"", version: int = 3) -> bytes:
    """The start of a qcow2 file: the header fields read, then the backing file name at offset 512."""
    offset = 512 if backing else 0
    header = QCOW2_MAGIC + struct.pack(">IQIIQ", version, offset, len(backing), 16, size)
    return header.ljust(512, b"\0") + backing


class DiskInfoTests(SynchronousTestCase):
    """:func:`disk_info` reads what a disk is from the file."""

    def write(self, data: bytes) -> str:
        path = os.path.abspath(self.mktemp())
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_qcow2_overlay(self) -> None:
        """A qcow2 header gives the format, the virtual size and the backing file; stat the allocation."""
        path = self.write(_qcow2_header(2 * GiB, b"/img/default-abc/rootfs.ext4"))
        info = disk_info(path)
        assert info is not None
        self.assertEqual((info.path, info.format, info.size_bytes, info.backing_file),
                         (path, "qcow2", 2 * GiB, "/img/default-abc/rootfs.ext4"))
        self.assertEqual(info.allocated_bytes, os.stat(path).st_blocks * 512)

    def test_qcow2_without_backing_file(self) -> None:
        """A qcow2 without a backing file has none."""
        path = self.write(_qcow2_header(GiB))
        self.assertEqual(disk_info(path), DiskInfo(path, "qcow2", GiB, os.stat(path).st_blocks * 512))

    def test_raw(self) -> None:
        """A file without a qcow2 header (or too short for one) is raw, of its own size."""
        for data in (b"x" * 5000, b"QFI"):
            info = disk_info(self.write(data))
            assert info is not None
            self.assertEqual((info.format, info.size_bytes, info.backing_file), ("raw", len(data), None))

    def test_missing(self) -> None:
        """No file, no disk."""
        self.assertIsNone(disk_info(self.mktemp()))
        self.assertIsNone(OverlayDisks(ProcessReactor()).info(self.mktemp()))


class QcowBaseTests(SynchronousTestCase):
    def test_qcow2_base(self) -> None:
        """An overlay over a qcow2 (a template's frozen disk) names its backing format qcow2."""
        from vmservice.storage.overlay import overlay_command

        self.assertEqual(
            overlay_command("qemu-img", "/t/disk.qcow2", "/n/disk.qcow2", 1024, "qcow2"),
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", "/t/disk.qcow2", "/n/disk.qcow2", "1024"],
        )
