# -*- test-case-name: tests.agent.test_relay -*-
"""
:mod:`vmservice.agent.relay`: a consumer's back-pressure as the credit of a
fake stream.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import FakeStream, RecordingProducer
from vmservice.agent.relay import CreditRelay, GuestOutput
from vmservice.wire import ResetCode


class GuestOutputTests(SynchronousTestCase):
    def test_producer(self) -> None:
        """Pausing withholds credit, resuming gives it; stopping resets with CANCEL and the reason given."""
        stream = FakeStream({}, None)  # type: ignore[arg-type]
        output = GuestOutput(stream, "gone")  # type: ignore[arg-type]
        output.pauseProducing()
        self.assertTrue(stream.paused)
        output.resumeProducing()
        self.assertFalse(stream.paused)
        stream.protocol = _Quiet()  # type: ignore[assignment]
        output.stopProducing()
        self.assertEqual(stream.aborted, (ResetCode.CANCEL, "gone"))

    def test_input_producer(self) -> None:
        """A producer of what we send is registered on the stream, and forgotten."""
        stream = FakeStream({}, None)  # type: ignore[arg-type]
        output = GuestOutput(stream, "gone")  # type: ignore[arg-type]
        producer = RecordingProducer()
        output.register_input_producer(producer)
        self.assertIs(stream.producer, producer)
        output.unregister_input_producer()
        self.assertIsNone(stream.producer)


class _Quiet:
    def connectionLost(self, reason: object) -> None:
        pass


class _Holding(CreditRelay):
    """A relay whose content waits for a consumer while ``holding``."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = False
        self.aborted = False

    def _regulate(self) -> None:
        self.give_credit(self.holding)

    def abort(self) -> None:
        self.aborted = True


class CreditRelayTests(SynchronousTestCase):
    def test_credit(self) -> None:
        """Credit is withheld while the consumer is paused or content is held; stopping aborts."""
        relay = _Holding()
        relay.pauseProducing()  # no stream yet: nothing to do
        relay._stream = stream = FakeStream({}, None)  # type: ignore[assignment,arg-type]
        relay.resumeProducing()
        self.assertFalse(stream.paused)
        relay.holding = True
        relay._regulate()
        self.assertTrue(stream.paused)
        relay.holding = False
        relay.pauseProducing()
        self.assertTrue(stream.paused)
        relay.resumeProducing()
        self.assertFalse(stream.paused)
        relay.stopProducing()
        self.assertTrue(relay.aborted)
