# -*- test-case-name: tests.images.test_powerbutton -*-
"""
Tests for :mod:`vmservice.guest.powerbutton`, the guest's power-button watcher (kept here with the image
that installs it), using FIFOs in place of /dev/input event devices.
"""

from __future__ import annotations

import io
import os
import sys
import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest import powerbutton
from vmservice.guest.powerbutton import EV_KEY, INPUT_EVENT, KEY_POWER, is_power_press, parse_events, watch


def event(kind: int, code: int, value: int) -> bytes:
    return INPUT_EVENT.pack(1700000000, 5, kind, code, value)


class ParseTests(SynchronousTestCase):
    """
    :func:`parse_events` and :func:`is_power_press`.
    """

    @given(st.lists(st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(-2**31, 2**31 - 1)),
                    max_size=10), st.data())
    @settings(max_examples=100, deadline=None)
    def test_split_anywhere(self, events: list[tuple[int, int, int]], data: st.DataObject) -> None:
        """
        However the byte stream is cut, feeding the pieces with the leftover gives back every event once.
        """
        stream = b"".join(event(*e) for e in events)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
        parsed: list[tuple[int, int, int]] = []
        pending = b""
        for start, end in zip([0] + cuts, cuts + [len(stream)]):
            got, pending = parse_events(pending + stream[start:end])
            parsed.extend(got)
        self.assertEqual(parsed, events)
        self.assertEqual(pending, b"")

    def test_power_press(self) -> None:
        """
        Only the power key going down counts: not its release, not a repeat, not another key.
        """
        self.assertTrue(is_power_press((EV_KEY, KEY_POWER, 1)))
        self.assertFalse(is_power_press((EV_KEY, KEY_POWER, 0)))
        self.assertFalse(is_power_press((EV_KEY, KEY_POWER, 2)))
        self.assertFalse(is_power_press((EV_KEY, 30, 1)))
        self.assertFalse(is_power_press((0, KEY_POWER, 1)))


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

    def test_main_runs_poweroff(self) -> None:
        """
        After a press, main() announces it on the console and execs poweroff.
        """
        calls = []
        self.patch(powerbutton, "watch", lambda directory: calls.append(("watch", directory)))
        self.patch(os, "execvp", lambda program, argv: calls.append(("exec", program, tuple(argv))))
        console = io.StringIO()
        self.patch(sys, "stdout", console)
        powerbutton.main(["/dev/input"])
        self.assertEqual(calls, [("watch", "/dev/input"), ("exec", "poweroff", ("poweroff",))])
        self.assertEqual(console.getvalue(), "vmservice-init: power button pressed, powering off\n")
