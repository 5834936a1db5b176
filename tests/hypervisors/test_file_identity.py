# -*- test-case-name: tests.hypervisors.test_file_identity -*-
"""Tests for :mod:`vmservice.hypervisors.file_identity`: what tells one build of a file from another."""

from __future__ import annotations

import os
import sys

from twisted.trial.unittest import SynchronousTestCase

from vmservice.hypervisors.file_identity import binary_identity, file_identity


class FileIdentityTests(SynchronousTestCase):
    def test_file(self) -> None:
        """A file's identity is its real path (through links), size and modification time in ns."""
        path = os.path.abspath(self.mktemp())
        with open(path, "wb") as f:
            f.write(b"12345")
        link = os.path.abspath(self.mktemp())
        os.symlink(path, link)
        info = os.stat(path)
        self.assertEqual(file_identity(link), (os.path.realpath(path), 5, info.st_mtime_ns))

    def test_missing(self) -> None:
        """A missing file has no identity."""
        self.assertIsNone(file_identity(self.mktemp()))

    def test_changed(self) -> None:
        """A file written again (a package upgrade) has another identity."""
        path = os.path.abspath(self.mktemp())
        with open(path, "wb") as f:
            f.write(b"1")
        before = file_identity(path)
        with open(path, "wb") as f:
            f.write(b"22")
        self.assertNotEqual(file_identity(path), before)

    def test_binary(self) -> None:
        """A program found on PATH is its file's identity as one line; one not found is its name."""
        real, size, mtime = file_identity(sys.executable) or ("", 0, 0)
        self.assertEqual(binary_identity(sys.executable), f"{real} {size} {mtime}")
        self.assertEqual(binary_identity("no-such-program-here"), "no-such-program-here")
