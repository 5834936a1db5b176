"""
Tests for :mod:`vmservice.nodes.console_rotation`: one timer that keeps every
node's console log bounded, on a fake clock.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from vmservice.nodes import console
from vmservice.nodes.console_rotation import CHECK_INTERVAL, ConsoleRotation


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
