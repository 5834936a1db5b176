# -*- test-case-name: tests.images.test_powerbutton -*-
"""
Tests for :mod:`vmservice.guest.powerbutton`, the guest's power-button watcher (kept here with the image
that installs it): parsing input events and what :func:`power_off` does after a press.  The watcher on
FIFOs standing in for /dev/input event devices, in the agent's loop, is in
:mod:`tests.integration.images.test_powerbutton`.
"""

from __future__ import annotations

import io
import os
import signal
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.images.input_events import event
from vmservice.guest import powerbutton
from vmservice.guest.powerbutton import EV_KEY, KEY_POWER, is_power_press, parse_events


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


class PowerOffTests(SynchronousTestCase):
    """
    :func:`power_off`, with ``posix_spawnp`` and ``kill`` replaced.
    """

    def setUp(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.console = io.StringIO()
        self.patch(sys, "stdout", self.console)
        self.patch(os, "kill", lambda pid, signum: self.calls.append(("kill", pid, signum)))

    def test_runs_poweroff(self) -> None:
        """
        A press is announced on the console and starts poweroff, without waiting for it.
        """
        def spawn(program: str, argv: list[str], environment: dict[str, str]) -> int:
            self.calls.append(("spawn", program, tuple(argv)))
            return 4242

        self.patch(os, "posix_spawnp", spawn)
        powerbutton.power_off()
        self.assertEqual(self.calls, [("spawn", "poweroff", ("poweroff",))])
        self.assertEqual(self.console.getvalue(), "vmservice-init: power button pressed, powering off\n")

    def test_signals_init_without_poweroff(self) -> None:
        """
        When poweroff cannot be started, init gets the signal busybox's poweroff would send it.
        """
        def spawn(program: str, argv: list[str], environment: dict[str, str]) -> int:
            raise FileNotFoundError(program)

        self.patch(os, "posix_spawnp", spawn)
        powerbutton.power_off()
        self.assertEqual(self.calls, [("kill", 1, signal.SIGUSR2)])
