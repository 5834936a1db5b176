# -*- test-case-name: tests.agent.test_inbound -*-
"""
Tests for :mod:`vmservice.agent.inbound`: delivery of a stream's data and
HALF_CLOSE, held back while paused.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice.agent.inbound import Inbox


class InboxTests(SynchronousTestCase):
    """
    An :class:`Inbox` whose deliveries are recorded.
    """

    def setUp(self) -> None:
        self.delivered: list[object] = []
        self.inbox = Inbox(self.delivered.append, lambda: self.delivered.append("end"))

    def test_not_paused(self) -> None:
        """
        Data and the HALF_CLOSE are passed on at once while not paused.
        """
        self.inbox.received(b"a")
        self.inbox.half_closed()
        self.assertEqual(self.delivered, [b"a", "end"])

    def test_paused(self) -> None:
        """
        While paused, data and the HALF_CLOSE wait; resuming passes them on in
        order; resuming again does nothing.
        """
        self.inbox.pause()
        self.inbox.received(b"a")
        self.inbox.received(b"b")
        self.inbox.half_closed()
        self.assertEqual(self.delivered, [])
        self.inbox.resume()
        self.assertEqual(self.delivered, [b"a", b"b", "end"])
        self.inbox.resume()
        self.assertEqual(self.delivered, [b"a", b"b", "end"])

    def test_pause_while_delivering(self) -> None:
        """
        Pausing from inside a delivery stops the deliveries after it; what
        arrives meanwhile waits behind what was held back.
        """
        inbox = self.inbox

        def deliver(data: bytes) -> None:
            self.delivered.append(data)
            inbox.pause()

        inbox._deliver = deliver
        inbox.pause()
        inbox.received(b"a")
        inbox.received(b"b")
        inbox.resume()
        self.assertEqual(self.delivered, [b"a"])
        self.assertTrue(inbox.paused)
        inbox.received(b"c")
        inbox.resume()
        inbox.resume()
        self.assertEqual(self.delivered, [b"a", b"b", b"c"])

    def test_clear(self) -> None:
        """
        What waits is dropped by :meth:`Inbox.clear`.
        """
        self.inbox.pause()
        self.inbox.received(b"a")
        self.inbox.half_closed()
        self.inbox.clear()
        self.inbox.resume()
        self.assertEqual(self.delivered, [])
