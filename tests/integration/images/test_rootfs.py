# -*- test-case-name: tests.integration.images.test_rootfs -*-
"""
Tests for :func:`vmservice.images.rootfs.make_ext4` with the real ``mkfs.ext4``, read back with ``debugfs``
and ``dumpe2fs``.  The tree assembly and library checks are in :mod:`tests.images.test_rootfs`.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from twisted.trial.unittest import SynchronousTestCase

from tests.images.rootfs_tree import write
from vmservice.images.rootfs import make_ext4


class Ext4Tests(SynchronousTestCase):
    """
    :func:`make_ext4`, with the real mkfs.ext4 and debugfs.
    """

    def test_content_and_room(self) -> None:
        """
        The image holds the tree (files, links, modes) and has at least the headroom free.
        """
        for tool in ("mkfs.ext4", "debugfs", "dumpe2fs"):
            if shutil.which(tool) is None:
                self.fail(f"{tool} is not installed (apt-get install e2fsprogs)")
        root = os.path.abspath(self.mktemp())
        write(root, "etc/hostname", b"guest\n")
        write(root, "usr/bin/tool", b"x" * 100000)
        os.chmod(os.path.join(root, "usr/bin/tool"), 0o755)
        os.symlink("usr/bin", os.path.join(root, "bin"))
        image = os.path.abspath(self.mktemp())
        size = make_ext4(root, image, headroom_mib=8)
        self.assertEqual(os.path.getsize(image), size)
        cat = subprocess.run(["debugfs", "-R", "cat /etc/hostname", image], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, check=True)
        self.assertEqual(cat.stdout, b"guest\n")
        listing = subprocess.run(["debugfs", "-R", "stat /bin", image], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, check=True, text=True).stdout
        self.assertIn('Fast link dest: "usr/bin"', listing)
        mode = subprocess.run(["debugfs", "-R", "stat /usr/bin/tool", image], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, check=True, text=True).stdout
        self.assertIn("Mode:  0755", mode)
        header = subprocess.run(["dumpe2fs", "-h", image], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                check=True, text=True).stdout
        fields = dict(line.split(":", 1) for line in header.splitlines() if ":" in line)
        free = int(fields["Free blocks"]) * int(fields["Block size"])
        self.assertGreaterEqual(free, 8 * 1024 * 1024)
