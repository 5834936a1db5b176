# -*- test-case-name: tests.api.test_shell -*-
"""
``GET /vm/{hostname}/shell`` (:mod:`vmservice.api.shell`,
:mod:`vmservice.api.websocket`) through the real Api on a
:class:`~vmservice.api.streaming.StreamingSite` and an HTTP/1.1 channel over a
``StringTransport``, with a fake agent whose shell stream the test drives:
the errors before the upgrade, the 101, frames both ways, the ends, and
back-pressure.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from typing import Any

from twisted.internet import reactor as global_reactor
from twisted.internet.error import ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.api.connections import parse_response
from tests.fakes import OneNodeFleet
from vmservice.api.app import Api
from vmservice.api.shell import ShellApi
from vmservice.api.streaming import StreamingSite
from vmservice.metrics import Metrics
from vmservice.wire import ResetCode
from vmservice.wire.shellframes import (
    DATA,
    EXIT,
    HEARTBEAT,
    REJECTED,
    SESSION_CLOSE,
    SHUTDOWN,
    STARTED,
    FrameDecoder,
    decode_message,
    encode_frame,
    encode_json_frame,
    encode_window_size,
)

KEY = base64.b64encode(b"0123456789abcdef").decode()
UPGRADE = f"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n"


def client_frame(payload: bytes, opcode: int = 2) -> bytes:
    """A masked WebSocket frame, as a client sends it."""
    mask = b"\x01\x02\x03\x04"
    n = len(payload)
    if n < 126:
        header = bytes([0x80 | opcode, 0x80 | n])
    elif n < 65536:
        header = bytes([0x80 | opcode, 0x80 | 126]) + struct.pack(">H", n)
    else:
        header = bytes([0x80 | opcode, 0x80 | 127]) + struct.pack(">Q", n)
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """The (opcode, payload) of the unmasked frames a server sent."""
    frames = []
    while data:
        opcode, n = data[0] & 0x0F, data[1] & 0x7F
        offset = 2
        if n == 126:
            n, offset = struct.unpack(">H", data[2:4])[0], 4
        elif n == 127:
            n, offset = struct.unpack(">Q", data[2:10])[0], 10
        frames.append((opcode, data[offset:offset + n]))
        data = data[offset + n:]
    return frames


class ShellApiTests(SynchronousTestCase):
    """The shell route over an in-memory HTTP connection."""

    def setUp(self) -> None:
        before = set(global_reactor.getDelayedCalls())

        def forget_timers() -> None:
            # autobahn's batched timers (close handshake) live on txaio's reactor.
            for call in global_reactor.getDelayedCalls():
                if call not in before and call.active():
                    call.cancel()

        self.addCleanup(forget_timers)
        self.reactor = MemoryReactorClock()
        self.fleet = OneNodeFleet()
        self.metrics = Metrics()
        api = Api(self.reactor, ShellApi(self.fleet, self.reactor).routes(), self.metrics, None)  # type: ignore[arg-type]
        self.site = StreamingSite(api.resource(), api.plan_body, reactor=self.reactor)
        self.connect()
        self.addCleanup(self._close)

    def connect(self) -> None:
        """A new HTTP connection; its transport knows its protocol, as a TCP transport does."""
        self.channel = self.site.buildProtocol(None)
        self.transport = StringTransport()
        self.transport.protocol = self.channel  # type: ignore[attr-defined]
        self.channel.makeConnection(self.transport)

    def _close(self) -> None:
        protocol: Any = self.transport.protocol  # type: ignore[attr-defined]
        if not self.transport.disconnecting:
            protocol.connectionLost(Failure(ConnectionLost()))

    def get(self, query: str = "", host: str = "demo-1", headers: str = UPGRADE) -> None:
        self.channel.dataReceived(f"GET /vm/{host}/shell?{query} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        self.reactor.advance(0)

    @property
    def stream(self) -> Any:
        return self.fleet.agent.streams[-1]

    def assertError(self, status: int, code: str) -> None:
        got, headers, body = parse_response(self.transport.value())
        self.assertEqual((got, headers[b"content-type"]), (status, b"application/json"), body)
        self.assertEqual(json.loads(body)["code"], code)

    def open(self, query: str = "") -> None:
        """Upgrade: the guest starts the shell, the 101 goes out."""
        self.get(query)
        self.assertEqual(self.transport.value(), b"")  # nothing before the guest answers
        self.stream.deliver(encode_json_frame(STARTED, {"pid": 42}))
        head, _, rest = self.transport.value().partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 101 "), head)
        accept = base64.b64encode(hashlib.sha1(KEY.encode() + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        self.assertIn(b"Sec-WebSocket-Accept: " + accept, head)
        self.transport.clear()

    def send(self, payload: bytes, opcode: int = 2) -> None:
        self.transport.protocol.dataReceived(client_frame(payload, opcode))  # type: ignore[attr-defined]

    def received(self) -> list[tuple[int, bytes]]:
        frames = server_frames(self.transport.value())
        self.transport.clear()
        return frames

    def open_shells(self) -> float:
        return self.metrics.registry.get_sample_value("vmservice_open_streams", {"kind": "shell"}) or 0.0

    def test_open_streams(self) -> None:
        """A shell counts as an open stream from its request until its WebSocket closes; a refused one not after."""
        self.get()
        self.assertEqual(self.open_shells(), 1)  # waiting for the guest
        self.stream.deliver(encode_json_frame(STARTED, {"pid": 42}))
        self.assertEqual(self.open_shells(), 1)  # upgraded: the WebSocket runs
        self.transport.protocol.connectionLost(Failure(ConnectionLost()))  # type: ignore[attr-defined]
        self.assertEqual(self.open_shells(), 0)
        self.connect()
        self.get(headers="")
        self.assertEqual(self.open_shells(), 0)

    def test_not_an_upgrade(self) -> None:
        """A plain GET is 400 websocket_required; nothing is started."""
        self.get(headers="")
        self.assertError(400, "websocket_required")
        self.assertEqual(self.fleet.agent.streams, [])

    def test_foreign_origin(self) -> None:
        """
        An upgrade from a foreign origin (a web page) is 403 forbidden_origin before the 101: no shell is
        started in the guest and the connection is closed; the same upgrade without Origin opens.
        """
        self.get(headers=UPGRADE + "Origin: http://evil.example\r\n")
        self.assertError(403, "forbidden_origin")
        self.assertNotIn(b" 101 ", self.transport.value())
        self.assertEqual(self.fleet.agent.streams, [])
        self.assertTrue(self.transport.disconnecting)
        self.connect()
        self.get(headers=UPGRADE + "Sec-Fetch-Site: cross-site\r\n")
        self.assertError(403, "forbidden_origin")
        self.assertEqual(self.fleet.agent.streams, [])
        self.connect()
        self.open()

    def test_bad_query(self) -> None:
        """A bad uid is 400 before anything is started."""
        self.get("uid=x")
        self.assertError(400, "invalid_query")
        self.assertEqual(self.fleet.agent.streams, [])

    def test_node_errors(self) -> None:
        """Unknown node 404, paused 409, agent down 503: ErrorResponses, no upgrade."""
        self.get(host="demo-9")
        self.assertError(404, "node_not_found")
        for state, status, code in (("paused", 409, "paused"), ("down", 503, "agent_unavailable")):
            self.transport.clear()
            self.fleet.state = state
            self.connect()
            self.get()
            got, _, body = parse_response(self.transport.value())
            self.assertEqual(got, status, body)

    def test_rejected(self) -> None:
        """A guest that refuses the cwd or shell makes a 400, not an upgrade."""
        self.get("cwd=/nope")
        self.stream.deliver(encode_json_frame(REJECTED, {"message": "cwd '/nope' is not a directory"}))
        got, _, body = parse_response(self.transport.value())
        self.assertEqual(got, 400, body)
        self.assertIn("/nope", json.loads(body)["error"])

    def test_header(self) -> None:
        """The query lands in the OPEN header; defaults are root, /bin/bash, the home, 80 x 24."""
        self.get()
        self.assertEqual(self.stream.header, {"op": "shell", "uid": 0, "gid": 0, "shell": "/bin/bash", "cwd": "",
                                              "cols": 80, "rows": 24})
        self.connect()
        self.get("uid=1000&gid=100&shell=/bin/sh&cwd=/srv")
        self.assertEqual(self.stream.header, {"op": "shell", "uid": 1000, "gid": 100, "shell": "/bin/sh",
                                              "cwd": "/srv", "cols": 80, "rows": 24})

    def test_frames_both_ways(self) -> None:
        """
        Output held before the 101 comes first; DATA and WINDOW_SIZE go to the
        guest; HEARTBEAT, text messages and short messages are ignored.
        """
        self.get()
        self.stream.deliver(encode_json_frame(STARTED, {"pid": 42}) + encode_frame(DATA, b"$ "))
        self.transport.value()
        head, _, rest = self.transport.value().partition(b"\r\n\r\n")
        self.assertEqual(server_frames(rest), [(2, encode_frame(DATA, b"$ "))])
        self.transport.clear()
        self.send(encode_frame(DATA, b"ls\r"))
        self.send(encode_window_size(100, 40))
        self.send(encode_frame(HEARTBEAT))
        self.send(b"text", opcode=1)
        self.send(b"\x01\x00")
        frames = [(f.kind, f.payload) for f in FrameDecoder().feed(bytes(self.stream.written))]
        self.assertEqual(frames, [(DATA, b"ls\r"), (2, struct.pack(">II", 100, 40))])
        self.stream.deliver(encode_frame(DATA, b"x" * 40000))
        out = self.received()
        self.assertEqual(b"".join(decode_message(p).payload for _, p in out), b"x" * 40000)
        self.assertTrue(all(len(p) <= 32768 for _, p in out))

    def test_exit(self) -> None:
        """When the shell exits: SESSION_CLOSE, then close 1000."""
        self.open()
        self.stream.deliver(encode_json_frame(EXIT, {"exit_code": 0, "signal": None}))
        self.stream.end()
        frames = self.received()
        self.assertEqual(frames[0], (2, encode_frame(SESSION_CLOSE)))
        self.assertEqual((frames[1][0], struct.unpack(">H", frames[1][1][:2])[0]), (8, 1000))
        self.assertIsNone(self.stream.aborted)

    def test_lost(self) -> None:
        """A shell lost (stream reset) ends with SESSION_CLOSE and close 4000."""
        self.open()
        self.stream.abortConnection(ResetCode.CANCEL, "agent gone")
        frames = self.received()
        self.assertEqual(frames[0], (2, encode_frame(SESSION_CLOSE)))
        self.assertEqual((frames[1][0], struct.unpack(">H", frames[1][1][:2])[0]), (8, 4000))

    def test_shutdown_and_disconnect_hang_up(self) -> None:
        """SHUTDOWN resets the stream (the guest hangs up); so does a client that goes away."""
        self.open()
        self.send(encode_frame(SHUTDOWN))
        self.assertEqual(self.stream.aborted, (ResetCode.CANCEL, "shell hung up"))
        self.connect()
        self.open()
        self.transport.protocol.connectionLost(Failure(ConnectionLost()))  # type: ignore[attr-defined]
        self.assertEqual(self.stream.aborted, (ResetCode.CANCEL, "shell hung up"))

    def test_back_pressure(self) -> None:
        """A full socket pauses the shell's output; the guest's missing credit pauses reading the socket."""
        self.open()
        self.assertIsNotNone(self.transport.producer)
        self.transport.producer.pauseProducing()
        self.assertTrue(self.stream.paused)
        self.transport.producer.resumeProducing()
        self.assertFalse(self.stream.paused)
        self.stream.producer.pauseProducing()
        self.assertEqual(self.transport.producerState, "paused")
        self.stream.producer.resumeProducing()
        self.assertEqual(self.transport.producerState, "producing")
