# -*- test-case-name: tests.integration.guest.test_rootgrowth -*-
"""
Tests for :mod:`vmservice.guest.rootgrowth` on the host: the superblock the real ``mkfs.ext4`` writes, and
:func:`~vmservice.guest.rootgrowth.grow_root` where there is nothing it may grow. Growing a mounted root
file system is tested in a real guest (:mod:`tests.integration.images.test_boot`).
"""

from __future__ import annotations

import os
import subprocess
import tempfile

from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest.rootgrowth import SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE, grow_root, parse_superblock


class RootGrowthTests(SynchronousTestCase):
    def test_mkfs_superblock(self) -> None:
        """The block count and size read from a fresh ext4 image are dumpe2fs's."""
        image = os.path.abspath(self.mktemp())
        with open(image, "wb") as stream:
            stream.truncate(96 * 1024 * 1024)
        subprocess.run(["mkfs.ext4", "-q", "-F", image], check=True)
        with open(image, "rb") as stream:
            stream.seek(SUPERBLOCK_OFFSET)
            parsed = parse_superblock(stream.read(SUPERBLOCK_SIZE))
        header = subprocess.run(["dumpe2fs", "-h", image], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                check=True, text=True).stdout
        fields = dict(line.split(":", 1) for line in header.splitlines() if ":" in line)
        self.assertEqual(parsed, (int(fields["Block count"]), int(fields["Block size"])))
        self.assertEqual(parsed[0] * parsed[1], 96 * 1024 * 1024)  # type: ignore[index]

    def test_nothing_to_grow_off_block_devices(self) -> None:
        """
        A directory on a file system that is not on a block device (/proc, a tmpfs) is left alone,
        silently.
        """
        said: list[str] = []
        for mountpoint in ("/proc", "/dev/shm"):
            self.assertFalse(grow_root(said.append, mountpoint))
        self.assertEqual(said, [])
