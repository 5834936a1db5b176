# -*- test-case-name: tests.images.test_initramfs -*-
"""
Tests for :mod:`vmservice.images.initramfs`.
"""

from __future__ import annotations

import stat

from twisted.trial.unittest import SynchronousTestCase

from tests.images.newc import parse_newc
from vmservice.images.cpio import encode_newc
from vmservice.images.initramfs import initramfs_entries


class InitramfsTests(SynchronousTestCase):
    """
    :func:`initramfs_entries`.
    """

    def setUp(self) -> None:
        modules = [("kernel/drivers/virtio/virtio.ko", b"v"), ("kernel/drivers/virtio/virtio_mmio.ko", b"m"),
                   ("kernel/drivers/block/virtio_blk.ko", b"b")]
        entries = initramfs_entries(b"#!/bin/sh\n", b"BUSYBOX", ["sh", "mount", "insmod", "busybox", "sh"], modules)
        self.members = parse_newc(encode_newc(entries))
        self.by_name = {m["name"]: m for m in self.members}

    def test_console_and_init(self) -> None:
        """
        /dev/console is the character device 5,1 and /init is an executable file with the script.
        """
        console = self.by_name["dev/console"]
        self.assertTrue(stat.S_ISCHR(console["mode"]))
        self.assertEqual(console["rdev"], (5, 1))
        init = self.by_name["init"]
        self.assertEqual(init["data"], b"#!/bin/sh\n")
        self.assertEqual(stat.S_IMODE(init["mode"]), 0o755)

    def test_busybox_links(self) -> None:
        """
        Each applet, once, is a link to busybox in /bin; busybox itself is the binary.
        """
        self.assertEqual(self.by_name["bin/busybox"]["data"], b"BUSYBOX")
        for applet in ("sh", "mount", "insmod"):
            member = self.by_name[f"bin/{applet}"]
            self.assertTrue(stat.S_ISLNK(member["mode"]))
            self.assertEqual(member["data"], b"busybox")

    def test_modules_in_order(self) -> None:
        """
        Modules are stored under /lib/modules and listed in /etc/vmservice/modules in load order.
        """
        self.assertEqual(self.by_name["lib/modules/kernel/drivers/virtio/virtio_mmio.ko"]["data"], b"m")
        self.assertEqual(self.by_name["etc/vmservice/modules"]["data"],
                         b"kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_mmio.ko\n"
                         b"kernel/drivers/block/virtio_blk.ko\n")

    def test_parents_first(self) -> None:
        """
        Every member's parent directory comes before it, as the kernel requires.
        """
        seen: set[str] = set()
        for member in self.members:
            name = str(member["name"])
            if "/" in name:
                self.assertIn(name.rsplit("/", 1)[0], seen, name)
            if stat.S_ISDIR(int(member["mode"])):  # type: ignore[call-overload]
                seen.add(name)
