# -*- test-case-name: tests.integration.storage.test_overlay -*-
"""
Tests for :mod:`vmservice.storage.overlay` with the real ``qemu-img`` on the
global reactor.  The same without a process: :mod:`tests.storage.test_overlay`.
"""

from __future__ import annotations

import json
import os
import subprocess

from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from vmservice.storage.overlay import StorageError, create_overlay, disk_info

GiB = 1 << 30


class QemuImgTests(TestCase):
    """Overlays made by ``qemu-img``."""

    def setUp(self) -> None:
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(self.directory)
        self.base = os.path.join(self.directory, "rootfs.ext4")
        with open(self.base, "wb") as f:
            f.truncate(16 << 20)

    async def test_overlay(self) -> None:
        """The overlay is a qcow2 file of the size asked for, backed by the raw base."""
        disk = os.path.join(self.directory, "disk.qcow2")
        await Deferred.fromCoroutine(create_overlay(global_reactor, self.base, disk, 2 * GiB))
        info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", disk], check=True,
                                         stdout=subprocess.PIPE).stdout)
        self.assertEqual((info["format"], info["virtual-size"]), ("qcow2", 2 * GiB))
        self.assertEqual((info["backing-filename"], info["backing-filename-format"]), (self.base, "raw"))
        # What the daemon reads of it agrees with qemu-img.
        read = disk_info(disk)
        assert read is not None
        self.assertEqual((read.format, read.size_bytes, read.backing_file), ("qcow2", 2 * GiB, self.base))
        self.assertEqual(read.allocated_bytes, info["actual-size"])

    async def test_qemu_img_fails(self) -> None:
        """An overlay qemu-img cannot write fails with qemu-img's own error."""
        disk = os.path.join(self.directory, "missing", "disk.qcow2")
        with self.assertRaises(StorageError) as caught:
            await Deferred.fromCoroutine(create_overlay(global_reactor, self.base, disk, 2 * GiB))
        self.assertIn("qemu-img failed (1)", str(caught.exception))
        self.assertIn("disk.qcow2", str(caught.exception))
