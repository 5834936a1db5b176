"""
Tests for :mod:`vmservice.nodes.console_rotation`: a console log bounded by
rotate(), and one timer that keeps every node's bounded, on a fake clock.
"""

from __future__ import annotations

import os
import stat
from typing import Any, Callable

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from tests.nodes.console_logs import NO_LIMIT, LogTestCase
from vmservice.nodes import console
from vmservice.nodes.console_rotation import CHECK_INTERVAL, ConsoleRotation, rotate


class ConsoleRotationTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.logs = [os.path.join(self.directory, f"node-{i}.log") for i in range(3)]
        #: The rounds run so far (each a blocking call), and the ones held back by the test.
        self.held: list[tuple[Callable[[], Any], Deferred[Any]]] = []
        self.hold = False

    def blocking(self, call: Callable[[], Any]) -> Deferred[Any]:
        """Runs a round at once, or holds it back (a round still running in its thread)."""
        if self.hold:
            d: Deferred[Any] = Deferred()
            self.held.append((call, d))
            return d
        return maybeDeferred(call)

    def grow(self, path: str, size: int) -> None:
        with open(path, "ab") as f:
            f.write(b"x" * (size - 1) + b"\n")

    def size(self, path: str) -> int:
        return sum(os.path.getsize(p) for p in (path, console.previous(path)) if os.path.exists(p))

    def service(self, size: int = 64 * 1024) -> ConsoleRotation:
        rotation = ConsoleRotation(self.clock, lambda: list(self.logs), self.blocking, size)
        rotation.startService()
        self.addCleanup(rotation.stopService)
        return rotation

    def test_at_start(self) -> None:
        """The first round runs as the daemon starts: a log that grew while no daemon ran is cut at once."""
        self.grow(self.logs[0], 10 * 1024 * 1024)
        self.grow(self.logs[1], 1000)
        self.service()
        self.assertLessEqual(self.size(self.logs[0]), 32 * 1024)
        self.assertEqual(os.path.getsize(self.logs[0]), 0)
        self.assertEqual(self.size(self.logs[1]), 1000)

    def test_every_interval(self) -> None:
        """Each interval every node's log is checked again, and rotated once past half of the size."""
        self.service()
        self.grow(self.logs[2], 40 * 1024)
        self.clock.advance(CHECK_INTERVAL - 0.01)
        self.assertEqual(os.path.getsize(self.logs[2]), 40 * 1024)
        self.clock.advance(0.01)
        self.assertEqual(os.path.getsize(self.logs[2]), 0)
        self.assertLessEqual(self.size(self.logs[2]), 32 * 1024)

    def test_rounds_never_overlap(self) -> None:
        """A round still running when the interval is up delays the next, which is timed from its end."""
        self.hold = True
        self.service()
        self.assertEqual(len(self.held), 1)
        self.clock.advance(10 * CHECK_INTERVAL)
        self.assertEqual(len(self.held), 1)
        call, d = self.held.pop()
        d.callback(call())
        self.clock.advance(CHECK_INTERVAL)
        self.assertEqual(len(self.held), 1)

    def test_failures_reported_once(self) -> None:
        """A log that cannot be bounded is reported once (not every second), and again after it recovered."""
        events: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        os.symlink(os.path.join(self.directory, "elsewhere"), self.logs[0])
        self.service()
        for _ in range(5):
            self.clock.advance(CHECK_INTERVAL)
        warned = [e for e in events if "cannot bound the console log" in e.get("log_format", "")]
        self.assertEqual(len(warned), 1)
        self.assertEqual(warned[0]["path"], self.logs[0])
        os.unlink(self.logs[0])
        self.clock.advance(CHECK_INTERVAL)
        os.symlink(os.path.join(self.directory, "elsewhere"), self.logs[0])
        self.clock.advance(CHECK_INTERVAL)
        self.assertEqual(len([e for e in events if "cannot bound the console log" in e.get("log_format", "")]), 2)

    def test_stops(self) -> None:
        """Stopped with the daemon: no round after."""
        rotation = self.service()
        rotation.stopService()
        self.assertEqual(self.clock.getDelayedCalls(), [])


class RotateTests(LogTestCase):
    def test_small_log(self) -> None:
        """A log within half of the size is left alone."""
        self.write(b"x\n" * 50)
        self.assertFalse(rotate(self.path, 200))
        self.assertEqual(os.path.getsize(self.path), 100)
        self.assertFalse(os.path.exists(console.previous(self.path)))
        self.assertFalse(rotate(os.path.join(self.directory, "missing"), 200))

    def test_rotates(self) -> None:
        """
        A log past half of the size: its newest half, from a line's start, becomes console.log.1 (0600,
        replacing the last one) and the log is emptied; the tail reads on across both.
        """
        self.write(b"older\n" * 10, console.previous(self.path))
        self.write(b"".join(b"line %03d\n" % i for i in range(100)))  # 900 bytes
        self.assertTrue(rotate(self.path, 1000))
        self.assertEqual(os.path.getsize(self.path), 0)
        with open(console.previous(self.path), "rb") as f:
            kept = f.read()
        self.assertEqual(kept, b"".join(b"line %03d\n" % i for i in range(45, 100)))
        self.assertEqual(stat.S_IMODE(os.stat(console.previous(self.path)).st_mode), 0o600)
        self.assertEqual(console.tail(self.path, 2, NO_LIMIT), ("line 098\nline 099\n", 2))
        self.assertEqual(sorted(os.listdir(self.directory)), ["console.log", "console.log.1"])

    def test_appender_starts_over(self) -> None:
        """What QEMU (O_APPEND) writes after a rotation lands at the log's new start, not past a hole."""
        writer = os.open(self.write(b"x" * 900 + b"\n"), os.O_WRONLY | os.O_APPEND)
        self.addCleanup(os.close, writer)
        self.assertTrue(rotate(self.path, 1000))
        os.write(writer, b"next\n")
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), b"next\n")

    def test_bounded(self) -> None:
        """However a guest writes, rotating after each write keeps both files within the size."""
        writer = os.open(self.write(b""), os.O_WRONLY | os.O_APPEND)
        self.addCleanup(os.close, writer)
        for i in range(2000):
            os.write(writer, b"message %d\n" % i * (i % 7))
            rotate(self.path, 4096)
            files = [self.path, console.previous(self.path)]
            total = sum(os.path.getsize(path) for path in files if os.path.exists(path))
            self.assertLessEqual(total, 4096 + 7 * 14)
        self.assertTrue(console.tail(self.path, 1, NO_LIMIT)[0].startswith("message 1999\n"))

    def test_no_links(self) -> None:
        """A link in the log's place is neither followed nor truncated."""
        target = self.write(b"z" * 5000, os.path.join(self.directory, "elsewhere"))
        os.symlink(target, self.path)
        self.assertRaises(OSError, rotate, self.path, 1000)
        self.assertEqual(os.path.getsize(target), 5000)

    def test_copy_fails(self) -> None:
        """When the older part cannot be written (a full disk), the log is emptied all the same."""
        self.write(b"z\n" * 1000)
        os.makedirs(os.path.join(console.previous(self.path) + ".partial", "in-the-way"))
        self.assertTrue(rotate(self.path, 1000))
        self.assertEqual(os.path.getsize(self.path), 0)
        self.assertFalse(os.path.exists(console.previous(self.path)))

    def test_hole_is_not_counted(self) -> None:
        """Only data counts: a log that is mostly a hole (a QEMU without O_APPEND) is not rotated for it."""
        with open(self.path, "wb") as f:
            f.seek(1 << 20)
            f.write(b"data\n")
        with open(self.path, "rb") as f:
            self.assertNotEqual(os.lseek(f.fileno(), 0, os.SEEK_DATA), 0,
                                f"the file system of {os.path.abspath(self.path)} does not report holes"
                                " (SEEK_DATA): run the tests on one that does (ext4, xfs, btrfs, tmpfs)")
        self.assertFalse(rotate(self.path, 64 * 1024))
