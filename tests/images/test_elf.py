# -*- test-case-name: tests.images.test_elf -*-
"""
Tests for :mod:`vmservice.images.elf`.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.images.elfs import make_elf
from vmservice.images.elf import ElfError, parse_elf


class ParseElfTests(SynchronousTestCase):
    """
    :func:`parse_elf`.
    """

    def test_static(self) -> None:
        """
        A file without a dynamic segment needs nothing; type, machine and entry are read.
        """
        info = parse_elf(make_elf(payload=b"code" * 100))
        self.assertEqual((info.type, info.machine, info.entry, info.needed), (2, 62, 0x401000, ()))

    def test_needed(self) -> None:
        """
        The DT_NEEDED names come back in order.
        """
        info = parse_elf(make_elf(needed=("libc.so.6", "libz.so.1"), e_type=3))
        self.assertEqual(info.needed, ("libc.so.6", "libz.so.1"))
        self.assertEqual(info.type, 3)

    def test_runpath(self) -> None:
        """
        DT_RUNPATH's directories come back split at ``:``; DT_RPATH serves when there is no DT_RUNPATH;
        a file without either has none.
        """
        info = parse_elf(make_elf(needed=("libsudo_util.so.0",), runpath="/usr/libexec/sudo:$ORIGIN/../lib"))
        self.assertEqual(info.runpath, ("/usr/libexec/sudo", "$ORIGIN/../lib"))
        info = parse_elf(make_elf(needed=("libx.so",), runpath="/opt/lib", runpath_tag=15))
        self.assertEqual(info.runpath, ("/opt/lib",))
        self.assertEqual(parse_elf(make_elf(needed=("libc.so.6",))).runpath, ())

    def test_needed_without_strtab(self) -> None:
        """
        DT_NEEDED entries with no string table are an error, not a guess.
        """
        self.assertRaises(ElfError, parse_elf, make_elf(needed=("libc.so.6",), with_strtab=False))

    def test_not_elf(self) -> None:
        """
        Bytes without the ELF magic, or a 32-bit ELF, are refused.
        """
        self.assertRaises(ElfError, parse_elf, b"MZ" + b"\x00" * 100)
        data = bytearray(make_elf())
        data[4] = 1
        self.assertRaises(ElfError, parse_elf, bytes(data))

    @given(st.data())
    @settings(max_examples=60, deadline=None)
    def test_truncated(self, data: st.DataObject) -> None:
        """
        Any truncation of a complete file is detected, because its loadable segment covers the whole file.
        """
        whole = make_elf(needed=("libc.so.6",), payload=b"x" * 500)
        cut = data.draw(st.integers(0, len(whole) - 1))
        self.assertRaises(ElfError, parse_elf, whole[:cut])

    @given(st.binary(max_size=400))
    @settings(max_examples=200, deadline=None)
    def test_garbage(self, garbage: bytes) -> None:
        """
        Random bytes after an ELF magic either parse or raise ElfError, never anything else.
        """
        try:
            parse_elf(b"\x7fELF\x02\x01" + garbage)
        except ElfError:
            pass
