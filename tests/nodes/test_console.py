"""Tests for :mod:`vmservice.nodes.console`: the console's tail, read from the end."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.errors import Internal
from vmservice.nodes import console


def _whole(data: bytes, count: int) -> tuple[str, int]:
    """The tail as reading the whole file gives it."""
    lines = data.decode("utf-8", "replace").replace("\r\n", "\n").splitlines(keepends=True)
    chosen = lines if count == 0 else lines[-count:]
    return "".join(chosen), len(chosen)


class TailTests(SynchronousTestCase):
    def write(self, data: bytes) -> str:
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_last_lines(self) -> None:
        """The last N lines, CRLF folded; 0 gives everything; a missing log is empty."""
        path = self.write(b"".join(b"line %d\r\n" % i for i in range(1, 31)))
        self.assertEqual(console.tail(path, 2), ("line 29\nline 30\n", 2))
        self.assertEqual(console.tail(path, 0)[1], 30)
        self.assertEqual(console.tail(self.mktemp(), 5), ("", 0))

    def test_reads_only_the_end(self) -> None:
        """A long log is not read whole: a block or two from its end are enough."""
        path = self.write(b"x" * (10 * console.BLOCK) + b"\nlast\n")
        reads: list[int] = []
        real = os.pread

        def counting(fd: int, size: int, offset: int) -> bytes:
            reads.append(size)
            return real(fd, size, offset)

        self.patch(os, "pread", counting)
        self.assertEqual(console.tail(path, 1), ("last\n", 1))
        self.assertLessEqual(sum(reads), 2 * console.BLOCK)

    def test_unreadable(self) -> None:
        """A log that cannot be read is a 500 log_read_failed."""
        path = self.mktemp()
        os.makedirs(path)
        self.assertEqual(self.assertRaises(Internal, console.tail, path, 2).code, "log_read_failed")

    @settings(max_examples=200)
    @given(
        st.lists(st.sampled_from([b"a", b"\n", b"\r\n", b"\r", b"\xc3", b"\xa9", b"\x0b", b"\xe2\x80\xa8", b"z" * 50]),
                 max_size=80),
        st.integers(0, 12),
        st.sampled_from([1, 3, 7, 64]),
    )
    def test_same_as_reading_everything(self, parts: list[bytes], count: int, block: int) -> None:
        """Whatever the bytes and the block size, the tail is what reading the whole file gives."""
        self.patch(console, "BLOCK", block)
        data = b"".join(parts)
        path = self.write(data)
        self.assertEqual(console.tail(path, count), _whole(data, count))
