"""
The guest's end of the tunnel ports: :class:`~vmservice.guest.port_relay.PortRelay`
with a socket pair standing in for the port (as ``tests.guest.test_bulkport``)
and another for the upstream, and the ``forward-port`` handler
(:mod:`vmservice.guest.tunnelport`) through a real session and loop: the
token hunt on a reused port with stale bytes, both directions, the ends
counted both ways, the host's end of the port going away, and a port held
by another tunnel.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Callable

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import StreamCollectorMixin
from vmservice.guest.bulkport import BulkPort, Stop, _Slot
from vmservice.guest.context import AgentContext
from vmservice.guest import port_relay
from vmservice.guest.port_relay import PortRelay
from vmservice.guest import tunnelport
from vmservice.guest.tunnelport import PortForwardHandler
from vmservice.wire.bulk import decode_upload_end, encode_upload_end, new_token
from vmservice.wire.errors import ResetCode
from vmservice.wire.events import Data, HalfClose, Open, Reset
from vmservice.wire.tunnelport import port_header


def wait(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.005)


def read_exactly(sock: socket.socket, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        chunk = sock.recv(size - len(got))
        if not chunk:
            break
        got += chunk
    return bytes(got)


class _Pairs(SynchronousTestCase):
    """A port (``daemon_end`` is the daemon's end) and an upstream (``upstream`` is its server's end)."""

    def setUp(self) -> None:
        self.guest, self.daemon_end = socket.socketpair()
        self.guest.setblocking(False)
        self.daemon_end.settimeout(10)
        self.local, self.upstream = socket.socketpair()
        self.local.setblocking(False)
        self.upstream.settimeout(10)
        for each in (self.guest, self.daemon_end, self.local, self.upstream):
            self.addCleanup(each.close)
        self.token = new_token()
        self.woken = threading.Event()

    def relay(self) -> PortRelay:
        relay = PortRelay(BulkPort(self.guest.fileno(), Stop()), self.local, self.token, self.woken.set)
        relay.start()
        self.addCleanup(self._stop, relay)
        return relay

    def _stop(self, relay: PortRelay) -> None:
        relay.stop()
        wait(lambda: relay.done)
        relay.close()


class RelayTests(_Pairs):
    def test_both_ways(self) -> None:
        """Stale bytes before the token are dropped; the token is echoed; bytes go both ways."""
        relay = self.relay()
        payload = os.urandom(3 << 20)
        self.daemon_end.sendall(b"what a dead tunnel left" + self.token + b"hello ")
        self.assertEqual(read_exactly(self.daemon_end, len(self.token)), self.token)
        sender = threading.Thread(target=self.upstream.sendall, args=(payload,))
        sender.start()
        self.assertEqual(read_exactly(self.daemon_end, len(payload)), payload)
        sender.join()
        self.daemon_end.sendall(b"upstream")
        self.assertEqual(read_exactly(self.upstream, 14), b"hello upstream")
        wait(lambda: relay.delivered == 14)  # counted once each send returned
        self.assertEqual(relay.sent, len(payload))

    def test_host_count(self) -> None:
        """The in thread stops once the host's count of bytes reached the upstream."""
        relay = self.relay()
        self.daemon_end.sendall(self.token + b"abcdef")
        read_exactly(self.daemon_end, len(self.token))
        self.assertEqual(read_exactly(self.upstream, 6), b"abcdef")
        relay.set_total(6)
        wait(lambda: relay.in_done)
        self.assertIsNone(relay.failure)
        self.assertFalse(relay.out_done)

    def test_upstream_end(self) -> None:
        """The upstream's end of file ends the out thread, every byte counted."""
        relay = self.relay()
        self.daemon_end.sendall(self.token)
        read_exactly(self.daemon_end, len(self.token))
        self.upstream.sendall(b"last")
        self.upstream.shutdown(socket.SHUT_WR)
        wait(lambda: relay.out_done)
        self.assertEqual(read_exactly(self.daemon_end, 4), b"last")
        self.assertEqual((relay.sent, relay.failure), (4, None))

    def test_host_gone(self) -> None:
        """The host's end of the port going away is a failure (the stream is then reset)."""
        relay = self.relay()
        self.daemon_end.sendall(self.token)
        read_exactly(self.daemon_end, len(self.token))
        self.daemon_end.close()
        wait(lambda: relay.in_done)
        self.assertIn("went away", relay.failure or "")

    def test_no_token(self) -> None:
        """Junk without the token is dropped until the wait ends (bounded)."""
        relay = self.relay()
        self.daemon_end.sendall(b"junk" * 1000)
        relay.stop()
        wait(lambda: relay.done)
        self.assertIsNone(relay.failure)
        self.assertEqual(relay.sent, 0)


    def test_in_thread_cannot_start(self) -> None:
        """A thread for the in direction that cannot start fails the relay, which is then done (not stuck)."""
        real = threading.Thread

        def thread(*args: object, name: str = "", **kwargs: object) -> threading.Thread:
            made = real(*args, name=name, **kwargs)  # type: ignore[arg-type]
            if name == "tunnel-in":
                def refuse() -> None:
                    raise RuntimeError("can't start new thread")
                made.start = refuse  # type: ignore[method-assign]
            return made

        self.patch(port_relay.threading, "Thread", thread)
        relay = self.relay()
        self.daemon_end.sendall(self.token)
        wait(lambda: relay.done)
        self.assertIn("can't start new thread", relay.failure or "")


class HandlerTests(StreamCollectorMixin, _Pairs):
    """``forward-port`` through a real session, the port a socket pair."""

    def setUp(self) -> None:
        _Pairs.setUp(self)
        self.start_session({"forward-port": PortForwardHandler}, AgentContext("t"))
        self.handshake()
        slot = _Slot()
        slot.fd = self.guest.fileno()
        BulkPort._slots["tunnel3"] = slot
        self.addCleanup(BulkPort._slots.pop, "tunnel3", None)
        self.server = socket.socket()
        self.addCleanup(self.server.close)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(4)
        self.start_collecting()

    def open(self, name: str = "tunnel3") -> int:
        stream_id = self.host.next_stream_id()
        header = port_header({"op": "forward", "host": "127.0.0.1", "port": self.server.getsockname()[1]},
                             name, self.token)
        self.send(Open(stream_id, header))
        return stream_id

    def host_codec_stream(self) -> int:
        return int(self.daemon_end.__class__ is None) or self.host_id()

    def host_id(self) -> int:
        return self.codec.next_stream_id()  # type: ignore[attr-defined, no-any-return]

    def test_host_ends(self) -> None:
        """
        The head says the port; bytes go both ways on it; the host's end names its count: the agent
        delivers that many, closes the upstream, and ends with its own count.
        """
        stream_id = self.open()
        peer = self.accept(self.server, stream_id, 10)
        self.assertEqual(self.head(stream_id), {"ok": True, "port": True})
        self.daemon_end.sendall(b"stale" + self.token + b"to the upstream")
        self.assertEqual(read_exactly(self.daemon_end, len(self.token)), self.token)
        peer.sendall(b"to the host")
        self.assertEqual(read_exactly(self.daemon_end, 11), b"to the host")
        self.send(Data(stream_id, encode_upload_end(15)), HalfClose(stream_id))
        self.pump(stream_id, lambda: self.half_closed)
        self.assertEqual(decode_upload_end(bytes(self.received)), 11)
        self.assertEqual(read_exactly(peer, 100), b"to the upstream")
        self.assertIsNone(self.reset)
        self.assertIsNotNone(BulkPort.claim(Stop(), wait=0, name="tunnel3"))  # let go
        BulkPort._slots["tunnel3"].lock.release()

    def test_upstream_ends(self) -> None:
        """The upstream's end: the agent ends the stream with the bytes it put on the port."""
        stream_id = self.open()
        peer = self.accept(self.server, stream_id, 10)
        self.head(stream_id)
        self.daemon_end.sendall(self.token)
        read_exactly(self.daemon_end, len(self.token))
        peer.sendall(b"bye")
        peer.close()
        self.pump(stream_id, lambda: self.half_closed)
        self.assertEqual(decode_upload_end(bytes(self.received)), 3)
        self.assertEqual(read_exactly(self.daemon_end, 3), b"bye")

    def test_reset(self) -> None:
        """A reset stops the relay, closes the upstream and lets go of the port."""
        stream_id = self.open()
        peer = self.accept(self.server, stream_id, 10)
        self.head(stream_id)
        self.daemon_end.sendall(self.token)
        read_exactly(self.daemon_end, len(self.token))
        self.send(Reset(stream_id, ResetCode.CANCEL, "client gone"))
        slot = BulkPort._slots["tunnel3"]
        self.pump(stream_id, lambda: not slot.lock.locked())
        self.assertEqual(peer.recv(10), b"")

    def test_busy(self) -> None:
        """A port another tunnel holds past the wait: REFUSED (the host then takes the stream)."""
        self.patch(tunnelport, "CLAIM_WAIT", 0.05)
        held = BulkPort.claim(Stop(), wait=0, name="tunnel3")
        assert held is not None
        self.addCleanup(held.release)
        stream_id = self.open()
        self.pump(stream_id, lambda: self.reset is not None)
        self.assertEqual(self.reset and self.reset.code, ResetCode.REFUSED)

    def test_host_ends_while_claiming(self) -> None:
        """
        The host's HALF_CLOSE while the port is still held by another tunnel: the stream ends, and the claim
        is not tried again (it would take the port once free and keep it for good).
        """
        held = BulkPort.claim(Stop(), wait=0, name="tunnel3")
        assert held is not None
        stream_id = self.open()
        self.send(HalfClose(stream_id))
        self.pump(stream_id, lambda: self.half_closed)
        held.release()
        deadline = time.monotonic() + 3 * tunnelport.CLAIM_RETRY
        while time.monotonic() < deadline:
            self.loop.run_once(0.01)
        again = BulkPort.claim(Stop(), wait=0, name="tunnel3")
        self.assertIsNotNone(again)
        assert again is not None
        again.release()

    def test_bad_header(self) -> None:
        """A header without a port or token: PROTOCOL_ERROR."""
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "forward-port", "host": "127.0.0.1", "port": 1, "tunnel_port": "bulk",
                                   "token": self.token.hex()}))
        self.pump(stream_id, lambda: self.reset is not None)
        self.assertEqual(self.reset and self.reset.code, ResetCode.PROTOCOL_ERROR)
