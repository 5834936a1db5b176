# -*- test-case-name: tests.guest.test_rootgrowth -*-
"""
Tests for :mod:`vmservice.guest.rootgrowth`: reading an ext4 superblock. Growing a real file system is
tested in a real guest (:mod:`tests.integration.images.test_boot`), and on the superblock ``mkfs.ext4``
writes in :mod:`tests.integration.guest.test_rootgrowth`.
"""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest.rootgrowth import SUPERBLOCK_SIZE, parse_superblock


def superblock(count: int, log_block_size: int, *, wide: bool = False, magic: int = 0xEF53) -> bytes:
    """A superblock with only the fields :func:`parse_superblock` reads set."""
    data = bytearray(SUPERBLOCK_SIZE)
    struct.pack_into("<I", data, 0x04, count & 0xFFFFFFFF)
    struct.pack_into("<I", data, 0x18, log_block_size)
    struct.pack_into("<H", data, 0x38, magic)
    struct.pack_into("<I", data, 0x60, 0x80 if wide else 0)
    struct.pack_into("<I", data, 0x150, count >> 32 if wide else 0xDEAD)
    return bytes(data)


class ParseSuperblockTests(SynchronousTestCase):
    """
    :func:`parse_superblock`.
    """

    def test_small(self) -> None:
        """Block count and block size (1024 shifted by the log field) of a file system without 64bit."""
        self.assertEqual(parse_superblock(superblock(73984, 2)), (73984, 4096))

    @given(st.integers(min_value=1, max_value=(1 << 48) - 1), st.integers(min_value=0, max_value=6))
    def test_64bit(self, count: int, log_block_size: int) -> None:
        """With the 64bit feature the count's high half is read too; without it, it is ignored."""
        self.assertEqual(parse_superblock(superblock(count, log_block_size, wide=True)),
                         (count, 1024 << log_block_size))
        self.assertEqual(parse_superblock(superblock(count, log_block_size))[0], count & 0xFFFFFFFF)  # type: ignore[index]

    def test_not_ext4(self) -> None:
        """Another magic number, or too few bytes, is no superblock."""
        self.assertIsNone(parse_superblock(superblock(100, 2, magic=0x1234)))
        self.assertIsNone(parse_superblock(superblock(100, 2)[:512]))
