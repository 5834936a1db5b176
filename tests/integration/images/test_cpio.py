# -*- test-case-name: tests.integration.images.test_cpio -*-
"""
Tests for :mod:`vmservice.images.cpio` against GNU ``cpio``: it reads what the writer makes.  The format
itself is tested in :mod:`tests.images.test_cpio`.
"""

from __future__ import annotations

import shutil
import subprocess

from twisted.trial.unittest import SynchronousTestCase

from vmservice.images.cpio import char_device, directory, encode_newc, regular_file, symlink


class GnuCpioTests(SynchronousTestCase):
    """
    :func:`encode_newc` read by GNU cpio.
    """

    def test_gnu_cpio_reads_it(self) -> None:
        """
        GNU cpio lists the members with their types, link targets and the console's device numbers.
        """
        cpio = shutil.which("cpio")
        if cpio is None:
            self.fail("cpio is not installed (apt-get install cpio)")
        entries = [directory("dev"), char_device("dev/console", 5, 1), directory("bin"),
                   regular_file("bin/busybox", b"\x7fELF" + b"x" * 1000, 0o755),
                   symlink("bin/sh", "busybox"), regular_file("init", b"#!/bin/sh\n", 0o755)]
        result = subprocess.run([cpio, "-itv", "--quiet"], input=encode_newc(entries), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, check=True)
        lines = result.stdout.decode().splitlines()
        self.assertEqual(len(lines), 6)
        self.assertTrue(lines[1].startswith("crw-------"), lines[1])
        self.assertIn("5,", lines[1])
        self.assertTrue(lines[4].startswith("lrwxrwxrwx"), lines[4])
        self.assertTrue(lines[4].endswith("bin/sh -> busybox"), lines[4])
        self.assertTrue(lines[5].startswith("-rwxr-xr-x"), lines[5])
