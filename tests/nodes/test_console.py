"""
Tests for :mod:`vmservice.nodes.console`: the console log's tail read from
the end, and all of it read piece by piece (bounding it on disk:
:mod:`tests.nodes.test_console_rotation`).
"""

from __future__ import annotations

import os
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.nodes.console_logs import NO_LIMIT, LogTestCase
from vmservice.errors import Internal
from vmservice.nodes import console

_PIECES = st.sampled_from([b"a", b"\n", b"\r\n", b"\r", b"\xc3", b"\xa9", b"\x0b", b"\xe2\x80\xa8", b"z" * 50])


def _whole(data: bytes, count: int) -> tuple[str, int]:
    """The tail as reading the whole file gives it."""
    lines = data.decode("utf-8", "replace").replace("\r\n", "\n").splitlines(keepends=True)
    chosen = lines if count == 0 else lines[-count:]
    return "".join(chosen), len(chosen)


def _streamed(path: str, limit: int = NO_LIMIT) -> tuple[str, int]:
    """All of the log as :class:`console.ConsoleText` reads it, and its line count."""
    text = console.ConsoleText(path, limit)
    pieces = []
    while piece := text.read():
        pieces.append(piece)
    text.close()
    return "".join(pieces), text.lines


class _Counted(bytes):
    """
    Bytes that record the work done on them: each ``count`` scans, each ``+``
    copies (a tail that concatenates or rescans what it has read does work
    that grows with the square of what it reads).
    """

    work: list[int] = []

    def count(self, *args: object) -> int:  # type: ignore[override]
        _Counted.work.append(len(self))
        return super().count(*args)  # type: ignore[arg-type]

    def __add__(self, other: bytes) -> _Counted:  # type: ignore[override]
        joined = _Counted(bytes(self) + bytes(other))
        _Counted.work.append(len(joined))
        return joined

    def __radd__(self, other: bytes) -> _Counted:
        joined = _Counted(bytes(other) + bytes(self))
        _Counted.work.append(len(joined))
        return joined


class TailTests(LogTestCase):
    def test_last_lines(self) -> None:
        """The last N lines, CRLF folded; 0 gives everything; a missing log is empty."""
        self.write(b"".join(b"line %d\r\n" % i for i in range(1, 31)))
        self.assertEqual(console.tail(self.path, 2, NO_LIMIT), ("line 29\nline 30\n", 2))
        self.assertEqual(console.tail(self.path, 0, NO_LIMIT)[1], 30)
        self.assertEqual(console.tail(self.mktemp(), 5, NO_LIMIT), ("", 0))

    def test_reads_only_the_end(self) -> None:
        """A long log is not read whole: a block or two from its end are enough."""
        self.write(b"x" * (10 * console.BLOCK) + b"\nlast\n")
        reads = self.reads()
        self.assertEqual(console.tail(self.path, 1, NO_LIMIT), ("last\n", 1))
        self.assertLessEqual(sum(reads), 2 * console.BLOCK)

    def test_linear_work(self) -> None:
        """
        Many lines wanted from small blocks: each byte read is scanned for line ends once and the blocks
        are joined once, so the work is linear in the bytes read (a tail that prepended each block to
        what it had and counted the whole again did work growing with their square).
        """
        self.patch(console, "BLOCK", 64)
        self.write(b"".join(b"line %04d\n" % i for i in range(4000)))
        real = os.pread
        read: list[int] = []

        def counted(fd: int, size: int, offset: int) -> bytes:
            data = real(fd, size, offset)
            read.append(len(data))
            return _Counted(data)

        self.patch(os, "pread", counted)
        self.patch(_Counted, "work", [])
        text, count = console.tail(self.path, 3000, NO_LIMIT)
        self.assertEqual(count, 3000)
        self.assertTrue(text.startswith("line 1000\n"))
        self.assertLessEqual(sum(read), 3000 * 10 + 64)
        self.assertLessEqual(sum(_Counted.work), sum(read))

    def test_limit(self) -> None:
        """
        However many lines are asked for, no more than the limit is read from the end (a log that grew
        while no daemon ran may be huge); the window then begins with a whole line.
        """
        self.write(b"".join(b"line %04d\n" % i for i in range(10_000)))
        reads = self.reads()
        text, count = console.tail(self.path, 5000, 1005)
        self.assertLessEqual(sum(reads), 1005)
        self.assertEqual((text[:10], count), ("line 9900\n", 100))
        # One line longer than the window: its newest bytes, cut (there is no whole line to show).
        self.write(b"y" * 5000)
        self.assertEqual(console.tail(self.path, 3, 100), ("y" * 100, 1))

    def test_both_parts(self) -> None:
        """The rotated older part, console.log.1, comes before the log, and a tail may span both."""
        self.write(b"one\ntwo\nthr", console.previous(self.path))
        self.write(b"ee\nfour\n")
        self.assertEqual(console.tail(self.path, 3, NO_LIMIT), ("two\nthree\nfour\n", 3))
        self.assertEqual(console.tail(self.path, 0, NO_LIMIT), ("one\ntwo\nthree\nfour\n", 4))
        os.unlink(self.path)
        self.assertEqual(console.tail(self.path, 1, NO_LIMIT), ("thr", 1))

    def test_hole(self) -> None:
        """
        A hole at the log's start (left by a QEMU that writes without O_APPEND after a truncation) is
        not read: no NUL comes out of it and it does not use up the window.
        """
        with open(self.path, "wb") as f:
            f.seek(8 * console.BLOCK)
            f.write(b"after the hole\n")
        with open(self.path, "rb") as f:
            self.assertNotEqual(os.lseek(f.fileno(), 0, os.SEEK_DATA), 0,
                                f"the file system of {os.path.abspath(self.path)} does not report holes"
                                " (SEEK_DATA): run the tests on one that does (ext4, xfs, btrfs, tmpfs)")
        self.assertEqual(console.tail(self.path, 0, 100), ("after the hole\n", 1))
        self.assertEqual(_streamed(self.path, 100), ("after the hole\n", 1))

    def test_unreadable(self) -> None:
        """A log that cannot be read is a 500 log_read_failed."""
        os.makedirs(self.path)
        self.assertEqual(self.assertRaises(Internal, console.tail, self.path, 2, NO_LIMIT).code, "log_read_failed")

    def test_no_links(self) -> None:
        """A link in the log's place is not followed (a 500 log_read_failed), nor in its older part's."""
        target = self.write(b"secret\n", os.path.join(self.directory, "elsewhere"))
        os.symlink(target, self.path)
        self.assertEqual(self.assertRaises(Internal, console.tail, self.path, 2, NO_LIMIT).code, "log_read_failed")
        self.assertEqual(self.assertRaises(Internal, _streamed, self.path).code, "log_read_failed")
        os.unlink(self.path)
        os.symlink(target, console.previous(self.path))
        self.assertEqual(self.assertRaises(Internal, console.tail, self.path, 2, NO_LIMIT).code, "log_read_failed")

    def test_no_descriptor_left(self) -> None:
        """Reading, failing to read and closing leave no descriptor open."""
        before = len(os.listdir("/proc/self/fd"))
        self.write(b"old\n", console.previous(self.path))
        self.write(b"new\n")
        console.tail(self.path, 1, NO_LIMIT)
        _streamed(self.path)
        text = console.ConsoleText(self.path, NO_LIMIT)
        text.read()
        text.close()
        self.assertEqual(text.read(), "")
        os.unlink(console.previous(self.path))
        os.makedirs(console.previous(self.path))
        self.assertRaises(Internal, console.tail, self.path, 1, NO_LIMIT)
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)

    @settings(max_examples=200)
    @given(st.lists(_PIECES, max_size=80), st.integers(0, 12), st.sampled_from([1, 3, 7, 64]), st.integers(0, 100))
    def test_same_as_reading_everything(self, parts: list[bytes], count: int, block: int, split: int) -> None:
        """
        Whatever the bytes, the block size and where the rotation split them between console.log.1 and
        console.log, the tail is what reading the whole log gives.
        """
        self.patch(console, "BLOCK", block)
        data = b"".join(parts)
        self.write(data[:split], console.previous(self.path))
        self.write(data[split:])
        self.assertEqual(console.tail(self.path, count, NO_LIMIT), _whole(data, count))


class ConsoleTextTests(LogTestCase):
    def test_pieces(self) -> None:
        """The log comes a block at a time, CRLF folded even across blocks, with its lines counted."""
        self.patch(console, "BLOCK", 4)
        self.write(b"abc\r\ndef\r\r\nghi")
        text = console.ConsoleText(self.path, NO_LIMIT)
        pieces = []
        while piece := text.read():
            pieces.append(piece)
        text.close()
        self.assertGreater(len(pieces), 2)
        self.assertEqual(("".join(pieces), text.lines), _whole(b"abc\r\ndef\r\r\nghi", 0))

    def test_bounded_reads(self) -> None:
        """Each read takes one block at most: memory does not grow with the log."""
        self.write(b"z" * (5 * console.BLOCK))
        reads = self.reads()
        text = console.ConsoleText(self.path, NO_LIMIT)
        while text.read():
            self.assertLessEqual(max(reads), console.BLOCK)
        text.close()
        self.assertEqual(sum(reads), 5 * console.BLOCK)

    def test_close_waits_for_a_read(self) -> None:
        """close() from another thread waits until the read under way is over, then nothing is read."""
        self.write(b"abc\n")
        text = console.ConsoleText(self.path, NO_LIMIT)
        reading, release = threading.Event(), threading.Event()
        real = os.pread

        def slow(fd: int, size: int, offset: int) -> bytes:
            reading.set()
            release.wait(10)
            return real(fd, size, offset)

        self.patch(os, "pread", slow)
        results: list[str] = []
        reader = threading.Thread(target=lambda: results.append(text.read()))
        reader.start()
        reading.wait(10)
        closer = threading.Thread(target=text.close)
        closer.start()
        closer.join(0.2)
        self.assertTrue(closer.is_alive())  # held by the read
        release.set()
        reader.join(10)
        closer.join(10)
        self.assertEqual(results, ["abc\n"])
        self.assertEqual(text.read(), "")

    def test_closed_before_the_first_read(self) -> None:
        """Closed before its first read (a client gone at once), it never opens the log."""
        self.write(b"abc\n")
        text = console.ConsoleText(self.path, NO_LIMIT)
        text.close()
        reads = self.reads()
        self.assertEqual(text.read(), "")
        self.assertEqual(reads, [])

    @settings(max_examples=200)
    @given(st.lists(_PIECES, max_size=80), st.sampled_from([1, 3, 7, 64]), st.integers(0, 100), st.integers(1, 200))
    def test_same_as_the_tail(self, parts: list[bytes], block: int, split: int, limit: int) -> None:
        """
        Whatever the bytes, the block size, the split between the two files and the window, all of the
        log read piece by piece is what the tail of all of it gives (and, with the window larger than
        the log, what reading the whole log gives).
        """
        self.patch(console, "BLOCK", block)
        data = b"".join(parts)
        self.write(data[:split], console.previous(self.path))
        self.write(data[split:])
        self.assertEqual(_streamed(self.path, limit), console.tail(self.path, 0, limit))
        self.assertEqual(_streamed(self.path), _whole(data, 0))
