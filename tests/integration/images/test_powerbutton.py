# -*- test-case-name: tests.integration.images.test_powerbutton -*-
"""
Tests for :func:`vmservice.guest.powerbutton.watch` in a thread, on FIFOs standing in for /dev/input event
devices.  Event parsing and :func:`~vmservice.guest.powerbutton.main` are in
:mod:`tests.images.test_powerbutton`.
"""

from __future__ import annotations

import os
import threading

from twisted.trial.unittest import SynchronousTestCase

from tests.images.test_powerbutton import event
from vmservice.guest.powerbutton import EV_KEY, KEY_POWER, watch


class WatchTests(SynchronousTestCase):
    """
    :func:`watch` on a directory of FIFOs standing in for event devices.
    """

    def setUp(self) -> None:
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(self.directory)
        for name in ("event0", "event1", "mice"):
            os.mkfifo(os.path.join(self.directory, name))
        self.writers: list[int] = []
        self.addCleanup(lambda: [os.close(fd) for fd in self.writers])

    def writer(self, name: str) -> int:
        # Opening for writing succeeds once watch() has opened the reading end; retry until then.
        path = os.path.join(self.directory, name)
        for _ in range(500):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                threading.Event().wait(0.01)
                continue
            self.writers.append(fd)
            return fd
        self.fail(f"watch() never opened {name}")

    def run_watch(self) -> threading.Thread:
        thread = threading.Thread(target=watch, args=(self.directory, 0.05), daemon=True)
        thread.start()
        self.addCleanup(thread.join, 5)
        return thread

    def test_returns_on_power_press(self) -> None:
        """
        watch() keeps reading through other keys and returns when the second device reports the power
        key, even when the event arrives in two writes.
        """
        thread = self.run_watch()
        first = self.writer("event0")
        second = self.writer("event1")
        os.write(first, event(EV_KEY, 30, 1) + event(EV_KEY, KEY_POWER, 0))
        thread.join(0.3)
        self.assertTrue(thread.is_alive())
        press = event(EV_KEY, KEY_POWER, 1)
        os.write(second, press[:10])
        thread.join(0.2)
        self.assertTrue(thread.is_alive())
        os.write(second, press[10:])
        thread.join(5)
        self.assertFalse(thread.is_alive())
