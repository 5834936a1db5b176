# -*- test-case-name: tests.api.test_request_body -*-
"""
Tests for :mod:`vmservice.api.request_body` and its machines
(:mod:`vmservice.api.body_arrival`, :mod:`vmservice.api.body_consumer`,
:mod:`vmservice.api.network_valve`): each machine against its diagram, and
the orders of the body's inputs that :mod:`tests.api.test_streaming` does
not take.
"""

from __future__ import annotations

from twisted.internet.error import ConnectionLost
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.api.body_arrival import ARRIVAL_MACHINE
from vmservice.api.body_consumer import CONSUMER_MACHINE
from vmservice.api.network_valve import VALVE_MACHINE, ValveCore, network_valve
from vmservice.api.request_body import RequestBody


class Network:
    """Records what the body did to the connection."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")


class DiagramTests(SynchronousTestCase):
    def test_arrival_diagram(self) -> None:
        """docs/state-machines/request-body-arrival.dot draws exactly the arrival machine's transitions."""
        self.assertEqual(drawn_transitions("request-body-arrival.dot"), machine_transitions(ARRIVAL_MACHINE))

    def test_consumer_diagram(self) -> None:
        """docs/state-machines/request-body-consumer.dot draws exactly the consumer's machine's transitions."""
        self.assertEqual(drawn_transitions("request-body-consumer.dot"), machine_transitions(CONSUMER_MACHINE))

    def test_valve_diagram(self) -> None:
        """docs/state-machines/request-body-valve.dot draws exactly the valve's transitions."""
        self.assertEqual(drawn_transitions("request-body-valve.dot"), machine_transitions(VALVE_MACHINE))


class ValveTests(SynchronousTestCase):
    def test_hold_again_release_once(self) -> None:
        """Every hold pauses the connection; a release resumes it only after a hold."""
        network = Network()
        valve = VALVE_MACHINE(ValveCore(network.pause, network.resume))
        valve.release()
        valve.hold()
        valve.hold()
        valve.release()
        valve.release()
        self.assertEqual(network.calls, ["pause", "pause", "resume"])

    def test_release_set_by_state(self) -> None:
        """The body's valve: a release does nothing while open, resumes once after a hold (its state's release)."""
        network = Network()
        valve = network_valve(network.pause, network.resume)
        valve.release()
        valve.hold()
        valve.hold()
        valve.release()
        valve.release()
        valve.hold()
        valve.release()
        self.assertEqual(network.calls, ["pause", "pause", "resume", "pause", "resume"])


class PieceTests(SynchronousTestCase):
    """What a chunk does in each state of the arrival machine (set by its transitions)."""

    def setUp(self) -> None:
        self.network = Network()
        self.body = RequestBody(self.network.pause, self.network.resume, high_water=4)

    def test_arriving_takes(self) -> None:
        """While the body arrives, chunks are held for the claim, then written as they come."""
        self.body.feed(b"ab")
        out = bytearray()
        d = self.body.deliver_to(out.extend)
        self.body.feed(b"")
        self.body.feed(b"cd")
        self.body.end()
        self.assertEqual((self.successResultOf(d), bytes(out), self.body.received), (4, b"abcd", 4))

    def test_discarding_counts(self) -> None:
        """Once the consumer stopped, chunks are counted and dropped."""
        out = bytearray()
        d = self.body.deliver_to(out.extend)
        self.body.feed(b"ab")
        self.body.stopProducing()
        self.body.feed(b"cde")
        self.assertEqual((self.successResultOf(d), bytes(out), self.body.received), (2, b"ab", 5))

    def test_arrived_ignores(self) -> None:
        """A chunk after the end is neither counted nor delivered."""
        self.body.feed(b"ab")
        self.body.end()
        self.body.feed(b"cd")
        out = bytearray()
        self.assertEqual(self.successResultOf(self.body.deliver_to(out.extend)), 2)
        self.assertEqual((bytes(out), self.body.received), (b"ab", 2))

    def test_lost_ignores(self) -> None:
        """A chunk after the loss is neither counted nor held."""
        self.body.feed(b"ab")
        self.body.fail(Failure(ConnectionLost()))
        self.body.feed(b"cd")
        self.assertEqual(self.body.received, 2)
        self.failureResultOf(self.body.deliver_to(lambda data: None), ConnectionLost)

    def test_chunk_inside_loss(self) -> None:
        """A chunk that comes while the loss is told (from the claim's errback) is ignored, as once Lost."""
        d = self.body.deliver_to(lambda data: None)
        d.addErrback(lambda failure: self.body.feed(b"late"))
        self.body.fail(Failure(ConnectionLost()))
        self.assertEqual((self.successResultOf(d), self.body.received), (None, 0))

    def test_flowing_open_spares_the_network(self) -> None:
        """Chunks the consumer takes at once, under the high water, never touch the connection."""
        out = bytearray()
        self.body.deliver_to(out.extend)
        for _ in range(3):
            self.body.feed(b"abcdef")
        self.assertEqual((len(out), self.network.calls), (18, []))


class RequestBodyOrderTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.network = Network()
        self.body = RequestBody(self.network.pause, self.network.resume, high_water=4)

    def test_pause_inside_write(self) -> None:
        """A consumer that pauses from inside its write gets no further chunk until it resumes."""
        out: list[bytes] = []

        def write(data: bytes) -> None:
            out.append(data)
            self.body.pauseProducing()

        self.body.feed(b"a")
        self.body.feed(b"b")
        self.body.feed(b"c")
        d = self.body.deliver_to(write)
        self.assertEqual(out, [b"a"])
        self.body.end()
        self.body.resumeProducing()
        self.assertEqual(out, [b"a", b"b"])
        self.assertNoResult(d)
        self.body.resumeProducing()
        self.assertEqual(self.successResultOf(d), 3)

    def test_paused_before_claim(self) -> None:
        """A producer paused before the claim holds the network at the first byte and delivers nothing until resumed."""
        self.body.pauseProducing()
        self.body.feed(b"x")
        self.assertEqual(self.network.calls, ["pause"])
        out = bytearray()
        d = self.body.deliver_to(out.extend)
        self.assertEqual(bytes(out), b"")
        self.body.resumeProducing()
        self.assertEqual((bytes(out), self.network.calls), (b"x", ["pause", "pause", "resume"]))
        self.body.end()
        self.assertEqual(self.successResultOf(d), 1)

    def test_hold_asserted_on_every_chunk(self) -> None:
        """Past the high water every chunk pauses the connection again; the end releases it."""
        self.body.feed(b"12345")
        self.body.feed(b"6")
        self.body.end()
        self.assertEqual(self.network.calls, ["pause", "pause", "resume"])
        self.assertTrue(self.body.complete)

    def test_claimed_twice(self) -> None:
        """A second claim, or one after the consumer stopped, raises RuntimeError."""
        self.body.deliver_to(lambda data: None)
        self.assertRaises(RuntimeError, self.body.deliver_to, lambda data: None)
        self.body.stopProducing()
        self.assertRaises(RuntimeError, self.body.deliver_to, lambda data: None)

    def test_lost_before_claim(self) -> None:
        """A body lost before its claim fails the claim with the loss; a later one raises."""
        self.body.feed(b"ab")
        self.body.fail(Failure(ConnectionLost()))
        self.failureResultOf(self.body.deliver_to(lambda data: None), ConnectionLost)
        self.assertRaises(RuntimeError, self.body.deliver_to, lambda data: None)
        self.assertFalse(self.body.complete)

    def test_loss_after_end_ignored(self) -> None:
        """Once the whole body arrived, a lost connection changes nothing: what was held is delivered."""
        self.body.feed(b"ab")
        self.body.end()
        self.body.fail(Failure(ConnectionLost()))
        out = bytearray()
        self.assertEqual(self.successResultOf(self.body.deliver_to(out.extend)), 2)
        self.assertEqual(bytes(out), b"ab")

    def test_stop_before_claim(self) -> None:
        """A body stopped before its claim drops what it held, releases the network and counts what comes."""
        self.body.feed(b"12345")
        self.body.stopProducing()
        self.body.feed(b"67")
        self.body.end()
        self.assertEqual((self.body.received, self.network.calls), (7, ["pause", "resume"]))
        self.assertRaises(RuntimeError, self.body.deliver_to, lambda data: None)

    def test_claim_after_delivery(self) -> None:
        """A claim after the whole body was delivered fires at once with its length."""
        out = bytearray()
        self.body.feed(b"abc")
        self.body.end()
        self.successResultOf(self.body.deliver_to(out.extend))
        self.assertEqual(self.successResultOf(self.body.deliver_to(out.extend)), 3)
        self.assertEqual(bytes(out), b"abc")

    def test_stop_after_loss(self) -> None:
        """A consumer that stops a lost body ends it: a claim after that raises."""
        self.body.fail(Failure(ConnectionLost()))
        self.body.stopProducing()
        self.assertRaises(RuntimeError, self.body.deliver_to, lambda data: None)
