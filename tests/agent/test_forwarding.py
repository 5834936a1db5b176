# -*- test-case-name: tests.agent.test_forwarding -*-
"""
The host's end of tunnels (:mod:`vmservice.agent.forwarding`) over fake
streams, and the upstream records of :mod:`vmservice.guestport.tunnel`.
"""

from __future__ import annotations


from twisted.internet.error import ConnectionLost
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import FakeExecAgent, Peer
from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.agent.forwarding import PEER_GONE_GRACE
from vmservice.agent.stream import StreamReset
from vmservice.agent.tunnel_state import TUNNEL_MACHINE
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.tunnel import ITunnel
from vmservice.wire.upstream import Upstream
from vmservice.wire import ResetCode
from vmservice.wire.payloads import encode_head


class TunnelTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.agent = FakeExecAgent()
        self.opened = self.agent.forward(Upstream(host="localhost", port=8000))
        self.stream = self.agent.streams[-1]

    def test_diagram(self) -> None:
        """docs/state-machines/tunnel.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("tunnel.dot"), machine_transitions(TUNNEL_MACHINE))

    def test_opened(self) -> None:
        """The head ``ok`` opens the tunnel; bytes before the join are kept and credit withheld."""
        self.assertEqual(self.stream.header, {"op": "forward", "host": "localhost", "port": 8000})
        self.assertNoResult(self.opened)
        self.stream.deliver(encode_head({"ok": True}) + b"early")
        tunnel = self.successResultOf(self.opened)
        self.assertTrue(ITunnel.providedBy(tunnel))
        self.assertTrue(self.stream.paused)
        peer = Peer()
        tunnel.join(peer)
        self.assertEqual((peer.data, peer.producer, self.stream.paused), (b"early", tunnel, False))
        tunnel.write(b"up")
        self.assertEqual(bytes(self.stream.written), b"up")
        tunnel.pauseProducing()
        self.assertTrue(self.stream.paused)
        tunnel.resumeProducing()
        self.stream.deliver(b"down")
        self.assertEqual(peer.data, b"earlydown")
        self.stream.protocol.readConnectionLost()
        self.assertTrue(self.stream.half_closed)
        self.stream.end()
        self.assertTrue(peer.lost)
        self.assertIsNone(peer.producer)
        self.successResultOf(tunnel.done)

    def test_refused(self) -> None:
        """An error head fails ``opened`` with the upstream kind."""
        self.stream.deliver(encode_head({"ok": False, "error": "refused", "message": "connection refused"}))
        error = self.failureResultOf(self.opened, AgentError).value
        self.assertEqual(error.kind, GuestErrorKind.UPSTREAM_REFUSED)
        self.assertIn("localhost:8000", str(error))

    def test_malformed_and_lost(self) -> None:
        """A head that is no object, or a stream lost before the head, fail ``opened``."""
        self.stream.deliver(encode_head([1]))  # type: ignore[arg-type]
        self.assertEqual(self.failureResultOf(self.opened, AgentError).value.kind, GuestErrorKind.MALFORMED)
        opened = self.agent.forward(Upstream(unix="/a"))
        self.agent.streams[-1].end(Failure(ConnectionLost()))
        self.assertEqual(self.failureResultOf(opened, AgentError).value.kind, GuestErrorKind.UNAVAILABLE)
        opened = self.agent.forward(Upstream(unix="/a"))
        self.agent.streams[-1].end(Failure(StreamReset(ResetCode.UNKNOWN_OP, "unknown op")))
        self.assertEqual(self.failureResultOf(opened, AgentError).value.kind, GuestErrorKind.UNSUPPORTED)

    def test_cancel(self) -> None:
        """Cancelling ``opened`` resets the stream."""
        self.opened.cancel()
        self.failureResultOf(self.opened)
        self.assertIsNotNone(self.stream.aborted)

    def test_malformed_head_resets(self) -> None:
        """A head that does not decode fails ``opened`` and resets the stream; ``done`` fires."""
        self.stream.deliver(b"\x00\x00\x00\x02[}")
        self.assertEqual(self.failureResultOf(self.opened, AgentError).value.kind, GuestErrorKind.MALFORMED)
        self.assertEqual(self.stream.aborted[0], ResetCode.PROTOCOL_ERROR)

    def test_join_after_the_end(self) -> None:
        """A peer joining a tunnel that is over is closed at once; close and abort do nothing then."""
        self.stream.deliver(encode_head({"ok": True}))
        tunnel = self.successResultOf(self.opened)
        self.stream.end()
        self.successResultOf(tunnel.done)
        peer = Peer()
        tunnel.join(peer)
        tunnel.close()
        tunnel.abort()
        self.assertEqual((peer.lost, self.stream.aborted), (True, None))

    def test_cancel_after_open(self) -> None:
        """Aborting an open tunnel resets it with CANCEL; the joined peer is let go."""
        self.stream.deliver(encode_head({"ok": True}))
        tunnel = self.successResultOf(self.opened)
        peer = Peer()
        tunnel.join(peer)
        tunnel.abort()
        self.assertEqual(self.stream.aborted, (ResetCode.CANCEL, "tunnel closed"))
        self.assertTrue(peer.lost)
        self.successResultOf(tunnel.done)

    def joined(self) -> tuple[ITunnel, Peer]:
        self.stream.deliver(encode_head({"ok": True}))
        tunnel = self.successResultOf(self.opened)
        peer = Peer()
        tunnel.join(peer)
        return tunnel, peer

    def test_peer_connection_ends(self) -> None:
        """
        The peer's connection ending (its transport stops producing, after
        the peer paused the tunnel) is its end, not a reset: the stream is
        half-closed after what the peer sent, so that reaches the upstream;
        what the guest still sends is dropped with credit given; the guest's
        end closes the tunnel, with nothing left on the clock.
        """
        tunnel, peer = self.joined()
        tunnel.write(b"last words")
        tunnel.pauseProducing()
        self.assertTrue(self.stream.paused)
        tunnel.stopProducing()
        self.assertEqual((bytes(self.stream.written), self.stream.half_closed), (b"last words", True))
        self.assertIsNone(self.stream.aborted)
        self.assertFalse(self.stream.paused)
        self.stream.deliver(b"the answer")
        self.assertEqual((peer.data, self.stream.paused), (b"", False))
        tunnel.stopProducing()  # told twice: nothing more
        tunnel.close()
        self.stream.end()
        self.successResultOf(tunnel.done)
        self.assertIsNone(self.stream.aborted)
        self.assertEqual(self.agent.clock.getDelayedCalls(), [])

    def test_peer_gone_guest_silent(self) -> None:
        """The peer left and the guest's end does not come (an upstream that does not read): reset in time."""
        tunnel, peer = self.joined()
        tunnel.stopProducing()
        self.agent.clock.advance(PEER_GONE_GRACE - 1)
        self.assertIsNone(self.stream.aborted)
        self.agent.clock.advance(1)
        self.assertEqual(self.stream.aborted, (ResetCode.CANCEL, "tunnel closed"))
        self.stream.end(Failure(StreamReset(ResetCode.CANCEL, "tunnel closed")))
        self.successResultOf(tunnel.done)

    def test_peer_gone_before_join(self) -> None:
        """A tunnel told its peer is gone before one joined (not done by the peers we have) resets."""
        self.stream.deliver(encode_head({"ok": True}))
        tunnel = self.successResultOf(self.opened)
        tunnel.stopProducing()
        self.assertEqual(self.stream.aborted, (ResetCode.CANCEL, "tunnel closed"))
