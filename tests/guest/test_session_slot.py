# -*- test-case-name: tests.guest.test_session_slot -*-
"""
Tests for :mod:`vmservice.guest.session_slot`: the table against its diagram
and :class:`SessionSlot`'s answers.  Its links on real sockets are tested in
:mod:`tests.integration.guest.test_vsock_listener`.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.diagrams import drawn_transitions
from vmservice.guest.session_slot import FREE, SERIAL, TRANSITIONS, VSOCK, SessionSlot


class TableTests(SynchronousTestCase):
    def test_diagram_is_the_table(self) -> None:
        """docs/state-machines/session-slot.dot draws exactly the table's transitions."""
        self.assertEqual(drawn_transitions("session-slot.dot"),
                         {(state, event, new) for (state, event), new in TRANSITIONS.items()})

    def test_ended_when_free_is_a_bug(self) -> None:
        """Releasing a free slot is no transition: it raises."""
        self.assertRaises(KeyError, SessionSlot().release)


class SlotTests(SynchronousTestCase):
    def test_first_link_takes_it(self) -> None:
        """Whichever link asks first holds the slot; the other is refused until it is released."""
        for first, second, held in (("serial", "vsock", SERIAL), ("vsock", "serial", VSOCK)):
            slot = SessionSlot()
            self.assertTrue(slot.take(first))
            self.assertFalse(slot.take(second))
            self.assertFalse(slot.take(first))
            self.assertEqual(slot.state, held)
            slot.release()
            self.assertEqual(slot.state, FREE)
            self.assertTrue(slot.take(second))

    def test_waiting_link_hears_release(self) -> None:
        """A refused link that asked to hear of the release hears it once, when the slot is free."""
        slot = SessionSlot()
        slot.take("serial")
        heard: list[str] = []
        slot.when_free(lambda: heard.append(slot.state))
        self.assertEqual(heard, [])
        slot.release()
        self.assertEqual(heard, [FREE])
        slot.take("vsock")
        slot.release()
        self.assertEqual(heard, [FREE])
