"""
The host's end of the tunnel ports (:mod:`vmservice.agent.tunnelports`,
:mod:`vmservice.agent.port_tunnel`) and a raw port's claim
(:mod:`vmservice.agent.port_claim`) on a memory reactor with fake streams:
the pool, the claim and its release, a tunnel over a port both ways with
its ends counted, the fall-backs to the stream (all ports taken, an older
agent, a busy port in the guest), and a port reused after a tunnel died half
way (the stale bytes before the guest's echo are dropped).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import FakeExecAgent, FakeStream, Peer, complete_port_connection
from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.agent.bulk import BulkLink
from vmservice.agent.port_claim import PORT_CLAIM_MACHINE, PortClaimCore
from vmservice.agent.port_tunnel import PEER_GONE_GRACE, PortTunnel
from vmservice.agent.stream import StreamReset
from vmservice.agent.tunnelports import TunnelPorts
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.tunnel import ITunnel
from vmservice.wire import ResetCode
from vmservice.wire.bulk import decode_upload_end, encode_upload_end
from vmservice.wire.payloads import encode_head
from vmservice.wire.tunnelport import MAX_TUNNEL_PORTS
from vmservice.wire.upstream import Upstream


class ClaimTests(SynchronousTestCase):
    def test_diagram(self) -> None:
        """docs/state-machines/port-claim.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("port-claim.dot"), machine_transitions(PORT_CLAIM_MACHINE))

    def test_one_user_at_a_time(self) -> None:
        """A claim is granted while Free only; a release (after a connect or a failed one) frees the port."""
        claim = PORT_CLAIM_MACHINE(PortClaimCore("tunnel0"))
        self.assertFalse(claim.busy())
        self.assertTrue(claim.claim())
        self.assertTrue(claim.busy())
        self.assertFalse(claim.claim())
        claim.released()  # the connect failed
        self.assertFalse(claim.busy())
        self.assertTrue(claim.claim())
        claim.connected()
        self.assertFalse(claim.claim())
        claim.released()
        claim.released()  # lost twice: nothing more
        self.assertTrue(claim.claim())


class _Agent(FakeExecAgent):
    def __init__(self, ports: TunnelPorts, clock: IReactorTime) -> None:
        super().__init__()
        self.tunnel_ports = ports
        self.clock = clock


class _Case(SynchronousTestCase):
    """A node directory with ``count`` tunnel port sockets (empty files stand in for QEMU's)."""

    count = 2

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.directory = tempfile.mkdtemp(prefix="vms-tunnelports-", dir="/tmp")
        self.addCleanup(os.rmdir, self.directory)
        self.ports = TunnelPorts(self.reactor, self.directory)
        for channel in self.ports.channels[:self.count]:
            open(channel.socket_path, "w").close()
            self.addCleanup(os.unlink, channel.socket_path)
        self.agent = _Agent(self.ports, self.reactor)

    def connect(self) -> tuple[BulkLink, StringTransport]:
        """Complete the newest connection to a port's socket."""
        return complete_port_connection(self.reactor)

    def open(self, upstream: Upstream = Upstream(host="localhost", port=8000)) -> tuple[Any, BulkLink, StringTransport, FakeStream]:
        """A tunnel over the next free port, its head not answered yet."""
        opened = self.agent.forward(upstream)
        link, transport = self.connect()
        return opened, link, transport, self.agent.streams[-1]

    def opened(self) -> tuple[PortTunnel, BulkLink, StringTransport, FakeStream, Peer]:
        """A tunnel over a port, opened and joined to a peer, the guest's echo of the token through."""
        opened, link, transport, stream = self.open()
        stream.deliver(encode_head({"ok": True, "port": True}))
        tunnel = self.successResultOf(opened)
        assert isinstance(tunnel, PortTunnel)
        peer = Peer()
        tunnel.join(peer)
        link.dataReceived(link.token)
        return tunnel, link, transport, stream, peer


class PoolTests(_Case):
    def test_sockets(self) -> None:
        """The pool names every port's socket in the node's directory, and follows a rename."""
        self.assertEqual([channel.name for channel in self.ports.channels],
                         [f"tunnel{index}" for index in range(MAX_TUNNEL_PORTS)])
        self.assertEqual(self.ports.channels[1].socket_path, os.path.join(self.directory, "tun1.sock"))
        self.ports.moved_to("/elsewhere")
        self.assertEqual(self.ports.channels[0].socket_path, "/elsewhere/tun0.sock")

    def test_header(self) -> None:
        """A tunnel claims the first free port and names it and its token in a forward-port header."""
        _, link, transport, stream = self.open()
        self.assertEqual(stream.header, {"op": "forward-port", "host": "localhost", "port": 8000,
                                         "tunnel_port": "tunnel0", "token": link.token.hex()})
        self.assertEqual(transport.value(), b"")  # the token goes once the guest holds the port
        _, second, _, stream = self.open(Upstream(unix="/run/x.sock"))
        self.assertEqual((stream.header["op"], stream.header["unix"], stream.header["tunnel_port"]),
                         ("forward-port", "/run/x.sock", "tunnel1"))
        self.assertNotEqual(second.token, link.token)

    def test_in_turn(self) -> None:
        """A port just freed is the last a new tunnel takes (its guest side may still be letting go)."""
        opened, link, transport, stream = self.open()
        stream.end(Failure(StreamReset(ResetCode.CANCEL, "client gone")))
        link.connectionLost(Failure(ConnectionError()))
        self.failureResultOf(opened, AgentError)
        _, _, _, stream = self.open()
        self.assertEqual(stream.header["tunnel_port"], "tunnel1")
        _, _, _, stream = self.open()
        self.assertEqual(stream.header["tunnel_port"], "tunnel0")

    def test_full(self) -> None:
        """With every port taken, a tunnel takes its stream as before (and says why in the log)."""
        self.open()
        self.open()
        self.agent.forward(Upstream(host="localhost", port=8000))
        self.assertEqual(self.agent.streams[-1].header, {"op": "forward", "host": "localhost", "port": 8000})
        self.assertEqual(len(self.reactor.unixClients), 2)

    def test_no_ports(self) -> None:
        """A node without tunnel port sockets (an older template) opens tunnels on their streams."""
        ports = TunnelPorts(self.reactor, os.path.join(self.directory, "none"))
        self.assertFalse(ports.present)
        agent = _Agent(ports, self.reactor)
        agent.forward(Upstream(host="localhost", port=8000))
        self.assertEqual(agent.streams[-1].header["op"], "forward")
        self.assertEqual(self.reactor.unixClients, [])

    def test_connect_fails(self) -> None:
        """A port whose socket does not answer is free again, and the tunnel takes its stream."""
        opened = self.agent.forward(Upstream(host="localhost", port=8000))
        for index in range(self.count):  # each port in turn
            self.assertEqual(self.agent.streams, [])
            connector = self.reactor.connectors[-1]
            self.reactor.unixClients[-1][1].clientConnectionFailed(connector, Failure(ConnectionRefusedError()))
        self.assertEqual(self.agent.streams[-1].header["op"], "forward")
        self.assertEqual([channel.busy for channel in self.ports.channels[:self.count]], [False] * self.count)
        self.assertNoResult(opened)


class FallbackTests(_Case):
    def test_older_agent(self) -> None:
        """UNKNOWN_OP: the port is let go, the tunnel opens on its stream, and no port is tried again."""
        opened, link, transport, stream = self.open()
        stream.end(Failure(StreamReset(ResetCode.UNKNOWN_OP, "unknown op 'forward-port'")))
        self.assertTrue(transport.disconnecting)
        link.connectionLost(Failure(ConnectionError()))
        fallback = self.agent.streams[-1]
        self.assertEqual(fallback.header, {"op": "forward", "host": "localhost", "port": 8000})
        fallback.deliver(encode_head({"ok": True}))
        self.assertTrue(ITunnel.providedBy(self.successResultOf(opened)))
        self.assertFalse(self.ports.present)
        self.assertFalse(self.ports.channels[0].busy)
        self.agent.forward(Upstream(host="localhost", port=8000))
        self.assertEqual(self.agent.streams[-1].header["op"], "forward")

    def test_busy_in_the_guest(self) -> None:
        """REFUSED (the guest's port is still held): this tunnel takes its stream, the next tries a port again."""
        opened, link, transport, stream = self.open()
        stream.end(Failure(StreamReset(ResetCode.REFUSED, "busy")))
        link.connectionLost(Failure(ConnectionError()))
        self.assertEqual(self.agent.streams[-1].header["op"], "forward")
        self.assertTrue(self.ports.present)
        self.open()
        self.assertEqual(self.agent.streams[-1].header["op"], "forward-port")

    def test_upstream_refused(self) -> None:
        """An error head is the tunnel's error, as on the stream; the port is freed."""
        opened, link, transport, stream = self.open()
        stream.deliver(encode_head({"ok": False, "error": "refused", "message": "no"}))
        stream.end()
        self.assertEqual(self.failureResultOf(opened, AgentError).value.kind, GuestErrorKind.UPSTREAM_REFUSED)
        self.assertTrue(transport.disconnecting)
        self.assertEqual(len(self.agent.streams), 1)

    def test_head_without_the_port(self) -> None:
        """An ok head that does not say the guest holds the port is a protocol error."""
        opened, link, transport, stream = self.open()
        stream.deliver(encode_head({"ok": True}))
        self.assertEqual(stream.aborted[0], ResetCode.PROTOCOL_ERROR)
        self.assertEqual(self.failureResultOf(opened, AgentError).value.kind, GuestErrorKind.MALFORMED)
        self.assertTrue(transport.disconnecting)


class TunnelTests(_Case):
    def test_both_ways(self) -> None:
        """The token goes first; the peer's bytes go on the link, the guest's (after its echo) to the peer."""
        opened, link, transport, stream = self.open()
        stream.deliver(encode_head({"ok": True, "port": True}))
        tunnel = self.successResultOf(opened)
        self.assertEqual(transport.value(), link.token)
        self.assertEqual(transport.producerState, "paused")  # no peer yet: what the guest sends is not read
        peer = Peer()
        tunnel.join(peer)
        self.assertEqual(transport.producerState, "producing")
        tunnel.write(b"to the upstream")
        self.assertEqual(transport.value(), link.token + b"to the upstream")
        self.assertEqual(bytes(stream.written), b"")  # nothing but the ends on the stream
        link.dataReceived(link.token + b"from the upstream")
        self.assertEqual(peer.data, b"from the upstream")
        tunnel.pauseProducing()
        self.assertEqual(transport.producerState, "paused")
        tunnel.resumeProducing()
        self.assertEqual(transport.producerState, "producing")

    def test_host_ends(self) -> None:
        """The peer closes: the bytes it sent are named on the stream; the guest's count is delivered whole."""
        tunnel, link, transport, stream, peer = self.opened()
        tunnel.write(b"12345")
        tunnel.close()
        self.assertEqual(decode_upload_end(bytes(stream.written)), 5)
        self.assertTrue(stream.half_closed)
        link.dataReceived(b"ab")
        stream.deliver(encode_upload_end(4))
        stream.protocol.readConnectionLost()
        self.assertFalse(transport.disconnecting)  # 2 of the guest's 4 bytes are still on the way
        link.dataReceived(b"cdEXTRA")
        self.assertEqual(peer.data, b"abcd")
        self.assertTrue(transport.disconnecting)
        stream.end()
        self.assertTrue(peer.lost)
        self.successResultOf(tunnel.done)

    def test_guest_ends(self) -> None:
        """The upstream ended: its N bytes reach the peer before the tunnel is over, then the port is freed."""
        tunnel, link, transport, stream, peer = self.opened()
        stream.deliver(encode_upload_end(6))
        stream.protocol.readConnectionLost()
        self.assertFalse(stream.half_closed)
        link.dataReceived(b"abc")
        self.assertFalse(stream.half_closed)
        link.dataReceived(b"def")
        self.assertTrue(stream.half_closed)
        self.assertTrue(transport.disconnecting)
        stream.end()
        self.assertEqual(peer.data, b"abcdef")
        self.assertTrue(peer.lost)
        link.connectionLost(Failure(ConnectionError()))
        self.assertFalse(self.ports.channels[0].busy)
        self.successResultOf(tunnel.done)

    def test_bad_end(self) -> None:
        """A guest end that is no count, or too long, resets the stream."""
        tunnel, link, transport, stream, peer = self.opened()
        stream.deliver(b"x" * 2000)
        self.assertEqual(stream.aborted[0], ResetCode.PROTOCOL_ERROR)
        self.assertTrue(transport.disconnecting)
        self.assertTrue(peer.lost)
        tunnel, link, transport, stream, peer = self.opened()
        stream.deliver(b"{\"size\": -1}")
        stream.protocol.readConnectionLost()
        self.assertEqual(stream.aborted[0], ResetCode.PROTOCOL_ERROR)

    def test_reset(self) -> None:
        """A reset (the agent restarted, the guest failed) ends the tunnel and frees the port."""
        tunnel, link, transport, stream, peer = self.opened()
        stream.end(Failure(StreamReset(ResetCode.PEER_RESTARTED, "gone")))
        self.assertTrue(transport.disconnecting)
        self.assertTrue(peer.lost)
        link.connectionLost(Failure(ConnectionError()))
        self.assertFalse(self.ports.channels[0].busy)
        self.successResultOf(tunnel.done)

    def test_link_lost_while_draining(self) -> None:
        """The port's connection lost while the guest's counted bytes are still on the way: the tunnel is reset."""
        tunnel, link, transport, stream, peer = self.opened()
        stream.deliver(encode_upload_end(10))
        stream.protocol.readConnectionLost()
        link.dataReceived(b"abc")
        link.connectionLost(Failure(ConnectionError()))
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)
        self.assertTrue(peer.lost)
        self.successResultOf(tunnel.done)

    def test_cancelled_while_connecting(self) -> None:
        """A tunnel cancelled (its client gone) while its port connects: the port is free, nothing opens."""
        opened = self.agent.forward(Upstream(host="localhost", port=8000))
        opened.cancel()
        self.failureResultOf(opened)
        self.assertEqual(self.agent.streams, [])
        self.assertFalse(self.ports.channels[0].busy)

    def test_link_lost(self) -> None:
        """The port's connection lost mid-way (QEMU went away, a guest that never echoes) resets the tunnel."""
        tunnel, link, transport, stream, peer = self.opened()
        link.connectionLost(Failure(ConnectionError()))
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)
        self.assertTrue(peer.lost)

    def test_back_pressure_to_the_client(self) -> None:
        """The client's producer is registered with the link: a full link pauses the client."""
        tunnel, link, transport, stream, peer = self.opened()
        producer = object()
        tunnel.register_producer(producer)  # type: ignore[arg-type]
        self.assertIs(transport.producer, producer)


class OnePortTests(_Case):
    """A node with one tunnel port: each tunnel after one that ended or died takes the same port."""

    count = 1

    def test_stale_bytes(self) -> None:
        """
        A tunnel that died half way frees its port; the next tunnel on that port drops what the dead
        one left before the guest's echo of the new token (even one cut across two reads).
        """
        tunnel, link, transport, stream, peer = self.opened()
        link.dataReceived(b"half")
        stream.end(Failure(StreamReset(ResetCode.PEER_RESTARTED, "gone")))
        link.connectionLost(Failure(ConnectionError()))
        opened, second, _, stream2 = self.open()
        self.assertEqual(stream2.header["tunnel_port"], "tunnel0")
        stream2.deliver(encode_head({"ok": True, "port": True}))
        other = Peer()
        self.successResultOf(opened).join(other)
        second.dataReceived(b"the tail of a tunnel that died" + link.token + second.token[:5])
        self.assertEqual(other.data, b"")
        second.dataReceived(second.token[5:] + b"fresh")
        self.assertEqual((peer.data, other.data), (b"half", b"fresh"))


    def test_peer_connection_ends(self) -> None:
        """
        The client's connection ends right after its last bytes (its transport stops the tunnel as its
        producer): no reset, which would overtake them; the host's end names them, the link is not read
        any more, and the guest's end closes the tunnel without waiting for its bytes.
        """
        tunnel, link, transport, stream, peer = self.opened()
        tunnel.write(b"last words")
        tunnel.stopProducing()
        self.assertIsNone(stream.aborted)
        self.assertEqual(decode_upload_end(bytes(stream.written)), 10)
        self.assertTrue(stream.half_closed)
        self.assertEqual(transport.value(), link.token + b"last words")
        self.assertFalse(transport.disconnecting)
        self.assertEqual(transport.producerState, "paused")
        tunnel.resumeProducing()
        self.assertEqual(transport.producerState, "paused")
        stream.deliver(encode_upload_end(1 << 30))
        stream.protocol.readConnectionLost()
        self.assertTrue(transport.disconnecting)
        stream.end()
        self.successResultOf(tunnel.done)
        link.connectionLost(Failure(ConnectionError()))
        self.assertFalse(self.ports.channels[0].busy)
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_peer_gone_guest_silent(self) -> None:
        """The peer left and the guest's end does not come (an upstream that does not read): reset in time."""
        tunnel, link, transport, stream, peer = self.opened()
        tunnel.stopProducing()
        self.reactor.advance(PEER_GONE_GRACE - 1)
        self.assertIsNone(stream.aborted)
        self.reactor.advance(1)
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)
        self.assertTrue(transport.disconnecting)

    def test_peer_connection_ends_after_the_guest(self) -> None:
        """The guest's end came first, its bytes still on the way: the peer's end closes the tunnel at once."""
        tunnel, link, transport, stream, peer = self.opened()
        stream.deliver(encode_upload_end(10))
        stream.protocol.readConnectionLost()
        tunnel.stopProducing()
        self.assertIsNone(stream.aborted)
        self.assertTrue(transport.disconnecting)
        self.assertTrue(stream.half_closed)

    def test_abort(self) -> None:
        """The tunnel aborted (the request's handler gave up): the stream is reset; its end frees the port."""
        tunnel, link, transport, stream, peer = self.opened()
        tunnel.abort()
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)
        self.assertTrue(transport.disconnecting)
        link.connectionLost(Failure(ConnectionError()))
        self.assertFalse(self.ports.channels[0].busy)
        _, again, _, stream = self.open()
        self.assertEqual(stream.header["tunnel_port"], "tunnel0")
