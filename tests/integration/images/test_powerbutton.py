# -*- test-case-name: tests.integration.images.test_powerbutton -*-
"""
Tests for :class:`vmservice.guest.powerbutton.PowerButton` in the guest agent's loop, on FIFOs standing in
for /dev/input event devices.  Event parsing and :func:`~vmservice.guest.powerbutton.power_off` are in
:mod:`tests.images.test_powerbutton`.
"""

from __future__ import annotations

import os
import time

from twisted.trial.unittest import SynchronousTestCase

from tests.images.input_events import event
from vmservice.guest.loop import Loop
from vmservice.guest.powerbutton import EV_KEY, KEY_POWER, PowerButton


class PowerButtonTests(SynchronousTestCase):
    """
    :class:`PowerButton` on a directory of FIFOs standing in for event devices, run by the agent's loop.
    """

    def setUp(self) -> None:
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(self.directory)
        for name in ("event0", "event1", "mice"):
            os.mkfifo(os.path.join(self.directory, name))
        self.writers: list[int] = []
        self.addCleanup(lambda: [os.close(fd) for fd in self.writers])
        self.loop = Loop()
        self.addCleanup(self.loop.close)
        self.presses: list[float] = []
        self.button = PowerButton(self.loop, lambda: self.presses.append(time.monotonic()), self.directory, 0.05)
        self.addCleanup(self.button.stop)
        self.button.start()

    def run_loop(self, seconds: float) -> None:
        """Run the loop for about ``seconds``."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.loop.run_once(max_wait=0.01)

    def writer(self, name: str) -> int:
        """The writing end of FIFO ``name``; opening it succeeds once the watcher has opened the reading end."""
        path = os.path.join(self.directory, name)
        for _ in range(500):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                self.run_loop(0.01)
                continue
            self.writers.append(fd)
            return fd
        self.fail(f"the watcher never opened {name}")

    def test_press_on_any_device(self) -> None:
        """
        The watcher keeps reading through other keys and a release and calls back when the second device
        reports the power key going down, even when the event arrives in two writes; ``mice`` is not
        opened.
        """
        first = self.writer("event0")
        second = self.writer("event1")
        os.write(first, event(EV_KEY, 30, 1) + event(EV_KEY, KEY_POWER, 0))
        self.run_loop(0.2)
        self.assertEqual(self.presses, [])
        press = event(EV_KEY, KEY_POWER, 1)
        os.write(second, press[:10])
        self.run_loop(0.2)
        self.assertEqual(self.presses, [])
        os.write(second, press[10:])
        self.run_loop(0.2)
        self.assertEqual(len(self.presses), 1)
        with self.assertRaises(OSError):
            os.open(os.path.join(self.directory, "mice"), os.O_WRONLY | os.O_NONBLOCK)

    def test_device_appearing_later(self) -> None:
        """
        A device created after the watcher started is picked up at the next rescan, and each press calls
        back.
        """
        os.mkfifo(os.path.join(self.directory, "event7"))
        late = self.writer("event7")
        for _ in range(2):
            os.write(late, event(EV_KEY, KEY_POWER, 1))
            self.run_loop(0.2)
        self.assertEqual(len(self.presses), 2)

    def test_stop_closes_devices(self) -> None:
        """
        After stop() no device is open any more (writers cannot open a FIFO without a reader) and
        nothing is watched.
        """
        self.writer("event0")
        self.button.stop()
        with self.assertRaises(OSError):
            os.open(os.path.join(self.directory, "event1"), os.O_WRONLY | os.O_NONBLOCK)
        self.run_loop(0.2)
        with self.assertRaises(OSError):
            os.open(os.path.join(self.directory, "event1"), os.O_WRONLY | os.O_NONBLOCK)
