# -*- test-case-name: tests.images.test_cpio -*-
"""
Tests for :mod:`vmservice.images.cpio`: archives decode to exactly the entries written, with a parser of
our own and with GNU cpio.
"""

from __future__ import annotations

import io
import os
import stat

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.images.newc import parse_newc
from vmservice.images.cpio import (CpioEntry, CpioError, char_device, directory, encode_newc, regular_file,
                                   symlink, tree_entries, write_newc)


_name_part = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=12).filter(
    lambda part: part not in (".", "..") and part != "TRAILER!!!")


@st.composite
def entry_lists(draw: st.DrawFn) -> list[CpioEntry]:
    names = draw(st.lists(_name_part, min_size=0, max_size=8, unique=True))
    entries = []
    for name in names:
        kind = draw(st.sampled_from(["file", "dir", "link", "chr"]))
        if kind == "file":
            entries.append(regular_file(name, draw(st.binary(max_size=300)), draw(st.integers(0, 0o7777))))
        elif kind == "dir":
            entries.append(directory(name, draw(st.integers(0, 0o7777))))
            for child in draw(st.lists(_name_part, max_size=3, unique=True)):
                entries.append(regular_file(f"{name}/{child}", draw(st.binary(max_size=50))))
        elif kind == "link":
            entries.append(symlink(name, draw(st.text(alphabet="abc/._", min_size=1, max_size=40))))
        else:
            entries.append(char_device(name, draw(st.integers(0, 4095)), draw(st.integers(0, 2**20 - 1))))
    return entries


class EncodeTests(SynchronousTestCase):
    """
    :func:`encode_newc` and :func:`write_newc`.
    """

    @given(entry_lists())
    @settings(max_examples=150, deadline=None)
    def test_round_trip(self, entries: list[CpioEntry]) -> None:
        """
        Parsing an archive gives back every entry's name, mode, data, owner, time and device numbers, in
        order, each with a distinct inode number, ended by the trailer and padded to 4 bytes.
        """
        data = encode_newc(entries)
        self.assertEqual(len(data) % 4, 0)
        members = parse_newc(data)
        self.assertEqual([m["name"] for m in members], [e.name for e in entries])
        for member, entry in zip(members, entries):
            self.assertEqual(member["mode"], entry.mode)
            self.assertEqual(member["data"], entry.data)
            self.assertEqual((member["uid"], member["gid"], member["mtime"]), (0, 0, 0))
            self.assertEqual(member["rdev"], (entry.rdev_major, entry.rdev_minor))
            self.assertEqual(member["nlink"], 2 if stat.S_ISDIR(entry.mode) else 1)
        inodes = [m["ino"] for m in members]
        self.assertEqual(len(set(inodes)), len(inodes))

    @given(entry_lists())
    @settings(max_examples=30, deadline=None)
    def test_write_matches_encode(self, entries: list[CpioEntry]) -> None:
        """
        Streaming to a file writes the same bytes as encoding in memory, and reports their number.
        """
        stream = io.BytesIO()
        written = write_newc(entries, stream)
        self.assertEqual(stream.getvalue(), encode_newc(entries))
        self.assertEqual(written, len(stream.getvalue()))

    def test_empty_archive(self) -> None:
        """
        An archive without entries is just the trailer.
        """
        self.assertEqual(parse_newc(encode_newc([])), [])

    def test_duplicate_names(self) -> None:
        """
        Two members with one name are refused: the kernel would silently keep the last.
        """
        self.assertRaises(CpioError, encode_newc, [directory("a"), regular_file("a", b"")])


class EntryTests(SynchronousTestCase):
    """
    :class:`CpioEntry` validation.
    """

    def test_bad_names(self) -> None:
        """
        Absolute names, empty names, NULs, ``..`` components and the trailer's name are refused.
        """
        for name in ("/init", "", "a\x00b", "a/../b", "./a", "a//b", "TRAILER!!!"):
            self.assertRaises(CpioError, regular_file, name, b"")

    def test_data_only_for_files_and_links(self) -> None:
        """
        A directory or device with data is refused, and so is a link without a target.
        """
        self.assertRaises(CpioError, CpioEntry, name="d", mode=stat.S_IFDIR | 0o755, data=b"x")
        self.assertRaises(CpioError, CpioEntry, name="l", mode=stat.S_IFLNK | 0o777)

    def test_unsupported_type(self) -> None:
        """
        A socket cannot be archived.
        """
        self.assertRaises(CpioError, CpioEntry, name="s", mode=stat.S_IFSOCK | 0o755)

    def test_field_range(self) -> None:
        """
        Values that do not fit the 8 hex digits of a header field are refused.
        """
        self.assertRaises(CpioError, char_device, "c", 2**32, 0)


class TreeTests(SynchronousTestCase):
    """
    :func:`tree_entries`.
    """

    def test_tree(self) -> None:
        """
        A directory tree becomes entries in sorted order, parents first, with the prefix applied,
        permissions kept and symbolic links kept as links.
        """
        root = self.mktemp()
        os.makedirs(os.path.join(root, "b/c"))
        with open(os.path.join(root, "b/c/file"), "wb") as stream:
            stream.write(b"hello")
        os.chmod(os.path.join(root, "b/c/file"), 0o640)
        os.symlink("c/file", os.path.join(root, "b/link"))
        os.symlink("b", os.path.join(root, "a"))
        entries = list(tree_entries(root, prefix="lib/modules"))
        self.assertEqual([e.name for e in entries],
                         ["lib/modules/a", "lib/modules/b", "lib/modules/b/c", "lib/modules/b/link",
                          "lib/modules/b/c/file"])
        by_name = {e.name: e for e in entries}
        self.assertEqual(by_name["lib/modules/a"].data, b"b")
        self.assertTrue(stat.S_ISLNK(by_name["lib/modules/b/link"].mode))
        self.assertEqual(by_name["lib/modules/b/c/file"].data, b"hello")
        self.assertEqual(stat.S_IMODE(by_name["lib/modules/b/c/file"].mode), 0o640)
        self.assertTrue(stat.S_ISDIR(by_name["lib/modules/b/c"].mode))
