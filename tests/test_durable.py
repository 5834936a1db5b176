# -*- test-case-name: tests.test_durable -*-
"""Tests for :mod:`vmservice.durable`: files replaced whole."""

from __future__ import annotations

import os
import stat

from twisted.trial.unittest import SynchronousTestCase

from vmservice import durable
from vmservice.durable import TEMPORARY, commit, write_atomic


class DurableTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = os.path.abspath(self.mktemp())
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

    def test_private_whatever_the_umask(self) -> None:
        """A file is written 0600 unless told otherwise, with the mode asked for whatever the umask."""
        path = os.path.join(self.directory, "f")
        old = os.umask(0)
        try:
            write_atomic(path, b"one")
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            os.umask(0o777)
            write_atomic(path, b"two", mode=0o640)
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o640)
        finally:
            os.umask(old)

    def test_temporary_name_is_unpredictable(self) -> None:
        """
        The temporary file has a random name: a file or a link planted under
        the names an earlier version used (``<name>.tmp<pid>``) is neither
        written nor followed.
        """
        path = os.path.join(self.directory, "node.json")
        target = os.path.join(self.directory, "target")
        with open(target, "wb") as f:
            f.write(b"keep")
        planted = f"{path}.tmp{os.getpid()}"
        os.symlink(target, planted)
        names: list[str] = []
        real_open = os.open

        def recording_open(name: str, flags: int, mode: int = 0o777, **kw: object) -> int:
            names.append(name)
            return real_open(name, flags, mode)

        self.patch(durable.os, "open", recording_open)
        write_atomic(path, b"record")
        write_atomic(path, b"record")
        temporaries = [os.path.basename(n) for n in names if n != path and os.path.dirname(n) == self.directory]
        self.assertEqual(len(set(temporaries)), 2)
        self.assertTrue(all(TEMPORARY.match(name) for name in temporaries), temporaries)
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"keep")
        self.assertTrue(os.path.islink(planted))

    def test_never_over_an_existing_temporary(self) -> None:
        """The temporary is created for this write alone: a file at its name (a link, even) fails the write, untouched."""
        path = os.path.join(self.directory, "f")
        target = os.path.join(self.directory, "target")
        with open(target, "wb") as f:
            f.write(b"keep")
        self.patch(durable, "temporary_name", lambda name: ".guessed.tmp")
        os.symlink(target, os.path.join(self.directory, ".guessed.tmp"))
        self.assertRaises(FileExistsError, write_atomic, path, b"x")
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"keep")
        self.assertTrue(os.path.islink(os.path.join(self.directory, ".guessed.tmp")))
        self.assertFalse(os.path.exists(path))

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
