# -*- test-case-name: tests.test_durable -*-
"""Tests for :mod:`vmservice.durable`: files replaced whole."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from vmservice.durable import commit, write_atomic


class DurableTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)

    def test_write_atomic_leaves_no_temporary(self) -> None:
        """An atomic write replaces the file, with the mode asked for, and leaves nothing beside it."""
        path = os.path.join(self.directory, "f")
        write_atomic(path, b"one")
        write_atomic(path, b"two", mode=0o600)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"two")
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        self.assertEqual(os.listdir(self.directory), ["f"])

    def test_failed_write_removes_its_temporary(self) -> None:
        """A write that cannot be put in place (the target is a directory) leaves no temporary file."""
        target = os.path.join(self.directory, "d")
        os.makedirs(os.path.join(target, "inside"))
        self.assertRaises(OSError, write_atomic, target, b"x")
        self.assertEqual(os.listdir(self.directory), ["d"])

    def test_commit_replaces(self) -> None:
        """commit() puts a complete file in place of the old one and the partial name is gone."""
        partial, final = os.path.join(self.directory, "f.partial"), os.path.join(self.directory, "f")
        for path, data in ((partial, b"new"), (final, b"old")):
            with open(path, "wb") as f:
                f.write(data)
        commit(partial, final)
        with open(final, "rb") as f:
            self.assertEqual(f.read(), b"new")
        self.assertFalse(os.path.exists(partial))
