"""
Tests for :mod:`vmservice.private_files`: directories of the daemon's alone,
made or verified without following links; new files made 0600 never over
a file or through a link; the modes of a tree tightened, links left alone.

The tests run as root (the daemon does): another user's directory is one
chowned to ``nobody`` (65534).
"""

from __future__ import annotations

import os
import stat

from twisted.trial.unittest import SynchronousTestCase

from vmservice.errors import Internal
from vmservice.private_files import NotPrivate, create_private, private_directory, tighten

NOBODY = 65534


def _mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


class PrivateDirectoryTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.root = os.path.abspath(self.mktemp())
        os.makedirs(self.root)
        self.path = os.path.join(self.root, "vmservice-0123456789ab")

    def test_made(self) -> None:
        """A missing directory is made 0700 (whatever the umask), its missing parents too."""
        old = os.umask(0o777)
        try:
            path = os.path.join(self.root, "a", "b")
            private_directory(path)
        finally:
            os.umask(old)
        self.assertTrue(stat.S_ISDIR(os.lstat(path).st_mode))
        self.assertEqual(_mode(path), 0o700)

    def test_own_kept(self) -> None:
        """The daemon's own directory (an earlier run's) is found again as it is, with what is in it."""
        os.mkdir(self.path, 0o700)
        with open(os.path.join(self.path, "ram"), "wb"):
            pass
        private_directory(self.path)
        self.assertEqual(os.listdir(self.path), ["ram"])

    def test_another_users_refused(self) -> None:
        """A directory another user made first under the daemon's name is refused, named, and left alone."""
        os.mkdir(self.path, 0o700)
        os.chown(self.path, NOBODY, NOBODY)
        error = self.assertRaises(NotPrivate, private_directory, self.path)
        self.assertEqual(str(error), f"{self.path} is owned by uid {NOBODY}, not by the daemon's user (uid 0)")
        self.assertIsInstance(error, Internal)
        self.assertEqual(os.stat(self.path).st_uid, NOBODY)
        self.assertRaises(NotPrivate, private_directory, self.path, repair=True)

    def test_link_refused(self) -> None:
        """A link in the directory's place is refused and never followed, even to a directory of the daemon's."""
        target = os.path.join(self.root, "target")
        os.mkdir(target, 0o755)
        os.symlink(target, self.path)
        error = self.assertRaises(NotPrivate, private_directory, self.path)
        self.assertEqual(str(error), f"{self.path} is a symbolic link")
        self.assertEqual(_mode(target), 0o755)
        self.assertRaises(NotPrivate, private_directory, self.path, repair=True)
        os.unlink(self.path)
        os.symlink(os.path.join(self.root, "missing"), self.path)
        self.assertEqual(str(self.assertRaises(NotPrivate, private_directory, self.path)),
                         f"{self.path} is a symbolic link")
        self.assertFalse(os.path.lexists(os.path.join(self.root, "missing")))

    def test_file_refused(self) -> None:
        """A file in the directory's place is refused."""
        with open(self.path, "wb"):
            pass
        error = self.assertRaises(NotPrivate, private_directory, self.path)
        self.assertEqual(str(error), f"{self.path} is not a directory")

    def test_wrong_mode_refused(self) -> None:
        """The daemon's user's directory that others may enter is refused (and not changed)."""
        os.mkdir(self.path)
        os.chmod(self.path, 0o755)
        error = self.assertRaises(NotPrivate, private_directory, self.path)
        self.assertEqual(str(error), f"{self.path} has mode 0755, not 0700: other users may enter it")
        self.assertEqual(_mode(self.path), 0o755)

    def test_repair(self) -> None:
        """
        With ``repair`` (the state directory): one others may enter is made
        0700; one others may write in is refused (they may have put anything
        in it).
        """
        os.mkdir(self.path)
        os.chmod(self.path, 0o755)
        private_directory(self.path, repair=True)
        self.assertEqual(_mode(self.path), 0o700)
        os.chmod(self.path, 0o1777)
        error = self.assertRaises(NotPrivate, private_directory, self.path, repair=True)
        self.assertEqual(str(error), f"{self.path} has mode 1777: other users may write in it")

    def test_cannot_be_made(self) -> None:
        """A directory that cannot be made (its parent is a file) says so."""
        with open(os.path.join(self.root, "file"), "wb"):
            pass
        error = self.assertRaises(NotPrivate, private_directory, os.path.join(self.root, "file", "d"))
        self.assertIn("cannot be made", str(error))


class CreatePrivateTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.root = os.path.abspath(self.mktemp())
        os.makedirs(self.root)

    def test_new_file(self) -> None:
        """A new file, 0600 (or the mode asked for) whatever the umask, open for writing."""
        path = os.path.join(self.root, "f")
        old = os.umask(0o777)
        try:
            fd = create_private(path)
        finally:
            os.umask(old)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
        self.assertEqual(_mode(path), 0o600)
        os.close(create_private(os.path.join(self.root, "g"), 0o640))
        self.assertEqual(_mode(os.path.join(self.root, "g")), 0o640)

    def test_never_over_a_file_or_through_a_link(self) -> None:
        """A file at the name, or a link planted there (dangling too), is refused and left as it was."""
        target = os.path.join(self.root, "target")
        with open(target, "wb") as f:
            f.write(b"keep")
        link = os.path.join(self.root, "link")
        os.symlink(target, link)
        dangling = os.path.join(self.root, "dangling")
        os.symlink(os.path.join(self.root, "nothing"), dangling)
        for path in (target, link, dangling):
            self.assertRaises(FileExistsError, create_private, path)
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"keep")
        self.assertFalse(os.path.lexists(os.path.join(self.root, "nothing")))


class TightenTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.root = os.path.abspath(self.mktemp())
        os.makedirs(self.root)

    def test_tree(self) -> None:
        """
        Every directory 0700, every file its owner's bits only (a read-only
        file stays read-only, set-id bits go), at any depth; what is right
        already is not counted.
        """
        os.makedirs(os.path.join(self.root, "nodes", "demo-1"))
        files = {"daemon.lock": 0o644, "nodes/demo-1/node.json": 0o644, "nodes/demo-1/disk.qcow2": 0o444,
                 "nodes/demo-1/state.bin": 0o600, "nodes/demo-1/run": 0o4755}
        for name, mode in files.items():
            path = os.path.join(self.root, name)
            with open(path, "wb"):
                pass
            os.chmod(path, mode)
        os.chmod(os.path.join(self.root, "nodes"), 0o750)
        os.chmod(self.root, 0o755)
        os.chmod(os.path.join(self.root, "nodes", "demo-1"), 0o700)
        self.assertEqual(tighten(self.root), 6)
        self.assertEqual([_mode(os.path.join(self.root, name)) for name in ("", "nodes", "nodes/demo-1")],
                         [0o700] * 3)
        self.assertEqual({name: _mode(os.path.join(self.root, name)) for name in files},
                         {"daemon.lock": 0o600, "nodes/demo-1/node.json": 0o600, "nodes/demo-1/disk.qcow2": 0o400,
                          "nodes/demo-1/state.bin": 0o600, "nodes/demo-1/run": 0o700})
        self.assertEqual(tighten(self.root), 0)

    def test_links_neither_followed_nor_changed(self) -> None:
        """Links in the tree (to files or directories outside it) are left alone, and so are their targets."""
        outside = os.path.join(self.root, "outside")
        os.makedirs(os.path.join(outside, "d"))
        with open(os.path.join(outside, "f"), "wb"):
            pass
        os.chmod(os.path.join(outside, "f"), 0o644)
        os.chmod(os.path.join(outside, "d"), 0o755)
        tree = os.path.join(self.root, "tree")
        os.mkdir(tree, 0o700)
        os.symlink(os.path.join(outside, "f"), os.path.join(tree, "file-link"))
        os.symlink(os.path.join(outside, "d"), os.path.join(tree, "dir-link"))
        self.assertEqual(tighten(tree), 0)
        self.assertEqual((_mode(os.path.join(outside, "f")), _mode(os.path.join(outside, "d"))), (0o644, 0o755))
        os.chmod(outside, 0o755)
        link = os.path.join(self.root, "link")
        os.symlink(outside, link)
        self.assertEqual(tighten(link), 0)
        self.assertEqual([_mode(os.path.join(outside, name)) for name in ("", "d", "f")], [0o755, 0o755, 0o644])

    def test_sockets(self) -> None:
        """A UNIX socket's file (a VM's QMP socket) gets its owner's bits only too."""
        path = os.path.join(self.root, "qmp.sock")
        os.mknod(path, stat.S_IFSOCK | 0o777)
        os.chmod(path, 0o777)
        tighten(self.root)
        self.assertEqual(_mode(path), 0o700)
