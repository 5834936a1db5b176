# -*- test-case-name: tests.images.oci.test_layers -*-
"""
Tests for :mod:`vmservice.images.oci.layers`: layers applied to trees in temporary directories
(whiteouts, opaque directories, links, paths that try to leave the tree), written by :mod:`tests.images.containers`.
"""

from __future__ import annotations

import io
import os
import stat

from twisted.trial.unittest import SynchronousTestCase

from tests.images.containers import Entry, layer
from vmservice.images.oci import OciError, apply_layer


def read(path: str) -> bytes:
    """The content of the file ``path``."""
    with open(path, "rb") as stream:
        return stream.read()


class ApplyLayerTests(SynchronousTestCase):
    """
    :func:`apply_layer` on a tree in a temporary directory.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        self.root = os.path.join(self.base, "root")
        os.makedirs(self.root)

    def apply(self, *entries: Entry, compress: bool = False) -> int:
        return apply_layer(io.BytesIO(layer(entries, compress)), self.root)

    def test_files_directories_and_modes(self) -> None:
        """
        Files and directories are created with their content, mode, owner and time; a later layer's file
        replaces the earlier one.
        """
        count = self.apply(Entry("etc", "dir", mode=0o755), Entry("etc/app.conf", data=b"one", mode=0o600, uid=7, gid=8),
                           Entry("./usr/bin/", "dir", mode=0o755), compress=True)
        self.assertEqual(count, 3)
        path = os.path.join(self.root, "etc/app.conf")
        self.assertEqual(read(path), b"one")
        info = os.stat(path)
        self.assertEqual((info.st_mode & 0o7777, info.st_uid, info.st_gid, int(info.st_mtime)),
                         (0o600, 7, 8, 1_700_000_000))
        self.assertTrue(os.path.isdir(os.path.join(self.root, "usr/bin")))
        self.apply(Entry("etc/app.conf", data=b"two", mode=0o644))
        self.assertEqual(read(path), b"two")
        self.assertEqual(os.stat(path).st_mode & 0o7777, 0o644)

    def test_parents_made(self) -> None:
        """
        A member whose directory the layer does not list gets its parents made.
        """
        self.apply(Entry("a/b/c/file", data=b"x"))
        self.assertEqual(read(os.path.join(self.root, "a/b/c/file")), b"x")

    def test_whiteout(self) -> None:
        """
        ``.wh.NAME`` removes the file or whole directory ``NAME`` of a lower layer, and nothing else.
        """
        self.apply(Entry("data/gone", data=b"x"), Entry("data/keep", data=b"y"), Entry("tree/sub/file", data=b"z"))
        self.apply(Entry("data/.wh.gone"), Entry(".wh.tree"))
        self.assertEqual(sorted(os.listdir(self.root)), ["data"])
        self.assertEqual(os.listdir(os.path.join(self.root, "data")), ["keep"])

    def test_whiteout_of_missing(self) -> None:
        """
        A whiteout of something no lower layer has is no error and leaves no file behind.
        """
        self.apply(Entry("data", "dir", mode=0o755))
        self.apply(Entry("data/.wh.nothing"), Entry(".wh.nowhere"))
        self.assertEqual(os.listdir(self.root), ["data"])
        self.assertEqual(os.listdir(os.path.join(self.root, "data")), [])

    def test_opaque_directory(self) -> None:
        """
        ``.wh..wh..opq`` empties its directory of the lower layers' entries, however deep, and keeps what
        its own layer put there, wherever the marker is in the layer.
        """
        self.apply(Entry("opaque/old", data=b"old"), Entry("opaque/sub/deep", data=b"old"),
                   Entry("opaque/sub/also", data=b"old"), Entry("other/file", data=b"kept"))
        self.apply(Entry("opaque/new", data=b"new"), Entry("opaque/sub", "dir", mode=0o755),
                   Entry("opaque/sub/fresh", data=b"new"), Entry("opaque/.wh..wh..opq"))
        self.assertEqual(sorted(os.listdir(os.path.join(self.root, "opaque"))), ["new", "sub"])
        self.assertEqual(os.listdir(os.path.join(self.root, "opaque/sub")), ["fresh"])
        self.assertEqual(read(os.path.join(self.root, "other/file")), b"kept")
        self.assertFalse(os.path.lexists(os.path.join(self.root, "opaque/.wh..wh..opq")))

    def test_opaque_new_directory(self) -> None:
        """
        An opaque marker in a directory no lower layer had just makes the directory.
        """
        self.apply(Entry("fresh/.wh..wh..opq"), Entry("fresh/file", data=b"x"))
        self.assertEqual(os.listdir(os.path.join(self.root, "fresh")), ["file"])

    def test_type_changes(self) -> None:
        """
        A file replaces a directory and a directory a file or symbolic link of a lower layer.
        """
        self.apply(Entry("thing/inside", data=b"x"), Entry("other", data=b"y"), Entry("link", "symlink", target="other"))
        self.apply(Entry("thing", data=b"now a file"), Entry("other", "dir", mode=0o755), Entry("link", "dir", mode=0o700))
        self.assertEqual(read(os.path.join(self.root, "thing")), b"now a file")
        self.assertTrue(os.path.isdir(os.path.join(self.root, "other")))
        self.assertFalse(os.path.islink(os.path.join(self.root, "link")))

    def test_hard_links(self) -> None:
        """
        A hard link shares the inode of its target, in the same layer or a lower one.
        """
        self.apply(Entry("usr/bin/perl", data=b"perl", mode=0o755))
        self.apply(Entry("usr/bin/perl5", "hardlink", target="usr/bin/perl"),
                   Entry("usr/bin/new", data=b"new"), Entry("usr/bin/new2", "hardlink", target="./usr/bin/new"))
        first = os.stat(os.path.join(self.root, "usr/bin/perl"))
        self.assertEqual(os.stat(os.path.join(self.root, "usr/bin/perl5")).st_ino, first.st_ino)
        self.assertEqual(first.st_nlink, 2)
        self.assertEqual(os.stat(os.path.join(self.root, "usr/bin/new2")).st_ino,
                         os.stat(os.path.join(self.root, "usr/bin/new")).st_ino)

    def test_hard_link_to_missing(self) -> None:
        """
        A hard link to a file the tree does not have is refused.
        """
        self.assertRaises(OciError, self.apply, Entry("a", "hardlink", target="nowhere"))

    def test_hard_link_outside(self) -> None:
        """
        A hard link whose target climbs out of the tree is refused, and nothing outside is linked.
        """
        with open(os.path.join(self.base, "secret"), "wb") as stream:
            stream.write(b"host")
        error = self.assertRaises(OciError, self.apply, Entry("stolen", "hardlink", target="../secret"))
        self.assertIn("outside", str(error))
        self.assertFalse(os.path.lexists(os.path.join(self.root, "stolen")))

    def test_traversal_refused(self) -> None:
        """
        A member whose name climbs out of the tree is refused before anything is written outside it.
        """
        for name in ("../escaped", "a/../../escaped", "/../escaped"):
            error = self.assertRaises(OciError, self.apply, Entry(name, data=b"x"))
            self.assertIn("outside", str(error))
        self.assertEqual(sorted(os.listdir(self.base)), ["root"])

    def test_absolute_names(self) -> None:
        """
        A member with an absolute name lands inside the tree.
        """
        self.apply(Entry("/etc/absolute", data=b"x"))
        self.assertEqual(read(os.path.join(self.root, "etc/absolute")), b"x")

    def test_symlinks_kept_and_confined(self) -> None:
        """
        Symbolic links are kept as they are, absolute ones too; a member written through a directory link
        lands inside the tree even when the link is absolute (``/``) or climbs (``../..``).
        """
        self.apply(Entry("usr/lib", "dir", mode=0o755), Entry("lib", "symlink", target="usr/lib"),
                   Entry("abs", "symlink", target="/"), Entry("up", "symlink", target="../../.."),
                   Entry("etc/localtime", "symlink", target="/usr/share/zoneinfo/UTC"))
        self.assertEqual(os.readlink(os.path.join(self.root, "etc/localtime")), "/usr/share/zoneinfo/UTC")
        self.apply(Entry("lib/libfoo.so", data=b"lib"), Entry("abs/via-abs", data=b"a"), Entry("up/via-up", data=b"u"))
        self.assertEqual(read(os.path.join(self.root, "usr/lib/libfoo.so")), b"lib")
        self.assertEqual(read(os.path.join(self.root, "via-abs")), b"a")
        self.assertEqual(read(os.path.join(self.root, "via-up")), b"u")
        self.assertEqual(sorted(os.listdir(self.base)), ["root"])

    def test_whiteout_through_link(self) -> None:
        """
        A whiteout below a directory link removes inside the tree, never the host's file.
        """
        with open(os.path.join(self.base, "victim"), "wb") as stream:
            stream.write(b"host")
        self.apply(Entry("abs", "symlink", target="/"))
        self.apply(Entry("abs/.wh.victim"))
        self.assertTrue(os.path.exists(os.path.join(self.base, "victim")))

    def test_whiteout_escape_refused(self) -> None:
        """
        A whiteout of ``..`` (``.wh...``) is refused and removes nothing: before, at the top of the layer it
        removed the tree's parent with the tree and its siblings, and below it the directory's parent.
        ``.wh..`` (the directory itself) and ``.wh.`` (which named the directory by ``os.path.join``) too.
        """
        with open(os.path.join(self.base, "sibling"), "wb") as stream:
            stream.write(b"host")
        self.apply(Entry("data/sub/file", data=b"x"))
        for name in (".wh...", "data/.wh...", "data/sub/.wh...", "data/sub/.wh..", "data/sub/.wh.", ".wh.", ".wh.."):
            error = self.assertRaises(OciError, self.apply, Entry(name))
            self.assertIn("not one entry of its directory", str(error))
        self.assertEqual(read(os.path.join(self.base, "sibling")), b"host")
        self.assertEqual(read(os.path.join(self.root, "data/sub/file")), b"x")
        self.assertEqual(sorted(os.listdir(self.base)), ["root", "sibling"])

    def test_whiteout_name_with_separator(self) -> None:
        """
        A whiteout whose name would hold a separator once the tar's name is split is refused; a backslash
        is a separator in a layer's names (it is read as one), so it never reaches a whiteout's name.
        """
        from vmservice.images.oci import layers

        for name in (".wh.a\\..", ".wh.a/b", ".wh.a\0b"):
            self.assertRaises(OciError, layers._whiteout_target, name, name)
        self.assertEqual(layers._whiteout_target("x/.wh.name", ".wh.name"), "name")
        self.assertEqual(layers._whiteout_target("x/.wh...dots", ".wh...dots"), "..dots")
        self.apply(Entry("data/..dots", data=b"x"), Entry("data/keep", data=b"y"))
        self.apply(Entry("data/.wh...dots"))
        self.assertEqual(os.listdir(os.path.join(self.root, "data")), ["keep"])

    def test_fifo(self) -> None:
        """
        A named pipe is made as one.
        """
        self.apply(Entry("run/pipe", "fifo", mode=0o600))
        self.assertTrue(stat.S_ISFIFO(os.lstat(os.path.join(self.root, "run/pipe")).st_mode))

    def test_not_a_tar(self) -> None:
        """
        Bytes that are not a tar file make an :class:`OciError`.
        """
        self.assertRaises(OciError, apply_layer, io.BytesIO(b"not a layer at all" * 100), self.root)
