"""
Streamed request bodies and NDJSON responses (:mod:`vmservice.api.streaming`):
:class:`RequestBody` flow control, :class:`StreamingRequest` on a real
``HTTPChannel`` over a ``StringTransport`` (dispatch at header time, the body
in chunks, the connection paused and resumed), and :class:`NdjsonStream`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, strategies as st
from twisted.internet.error import ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from vmservice.api.ndjson import NdjsonStream
from vmservice.api.request_body import RequestBody
from vmservice.api.streaming import StreamingSite, request_body


class Network:
    """Counts pause/resume of the connection."""

    def __init__(self) -> None:
        self.paused = False

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False


class RequestBodyTests(SynchronousTestCase):
    """:class:`RequestBody` as a push producer between the network and a consumer."""

    @given(st.lists(st.binary(min_size=1, max_size=100), max_size=30), st.integers(min_value=0, max_value=30))
    def test_all_bytes_in_order(self, chunks: list[bytes], attach_after: int) -> None:
        """Chunks held before the consumer attaches and fed after come out whole, in order."""
        body = RequestBody(high_water=64)
        out = bytearray()
        for chunk in chunks[:attach_after]:
            body.feed(chunk)
        d = body.deliver_to(out.extend)
        for chunk in chunks[attach_after:]:
            body.feed(chunk)
        body.end()
        self.assertEqual(self.successResultOf(d), sum(map(len, chunks)))
        self.assertEqual(bytes(out), b"".join(chunks))

    def test_pauses_network_at_high_water(self) -> None:
        """Unconsumed bytes beyond the high water pause the network; draining resumes it."""
        network = Network()
        body = RequestBody(network.pause, network.resume, high_water=10)
        body.feed(b"x" * 6)
        self.assertFalse(network.paused)
        body.feed(b"x" * 6)
        self.assertTrue(network.paused)
        out = bytearray()
        body.deliver_to(out.extend)
        self.assertFalse(network.paused)
        self.assertEqual(len(out), 12)

    def test_consumer_pause(self) -> None:
        """A paused consumer gets nothing and the network pauses; resuming delivers what was held."""
        network = Network()
        body = RequestBody(network.pause, network.resume, high_water=1000)
        out = bytearray()
        body.deliver_to(out.extend)
        body.pauseProducing()
        body.feed(b"abc")
        self.assertEqual((bytes(out), network.paused), (b"", True))
        body.resumeProducing()
        self.assertEqual((bytes(out), network.paused), (b"abc", False))

    def test_stop_discards(self) -> None:
        """A stopped consumer ends delivery; the rest of the body is read and dropped."""
        network = Network()
        body = RequestBody(network.pause, network.resume, high_water=4)
        out = bytearray()
        d = body.deliver_to(out.extend)
        body.pauseProducing()
        body.feed(b"12345")
        body.stopProducing()
        body.feed(b"more")
        self.assertEqual((bytes(out), network.paused, body.received), (b"", False, 9))
        self.successResultOf(d)

    def test_connection_lost(self) -> None:
        """A lost connection fails the delivery."""
        body = RequestBody()
        d = body.deliver_to(lambda data: None)
        body.fail(Failure(ConnectionLost()))
        self.failureResultOf(d, ConnectionLost)

    def test_buffered_content(self) -> None:
        """request_body replays an ordinary (buffered) request's content."""
        from io import BytesIO

        class Plain:
            content = BytesIO(b"hello")

        body = request_body(Plain())  # type: ignore[arg-type]
        out = bytearray()
        self.successResultOf(body.deliver_to(out.extend))
        self.assertEqual(bytes(out), b"hello")


class Echo(Resource):
    """Writes each body chunk back as soon as it arrives (full duplex)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Any] = []
        self.failures: list[Failure] = []

    def render_POST(self, request: Any) -> Any:
        self.requests.append(request)
        body = request_body(request)
        request.registerProducer(body, True)

        def done(length: int) -> None:
            if request.finished:
                return
            request.unregisterProducer()
            request.write(b"[%d]" % length)
            request.finish()

        body.deliver_to(request.write).addCallbacks(done, self.failures.append)
        return NOT_DONE_YET


class StreamingRequestTests(SynchronousTestCase):
    """:class:`StreamingRequest` on a real HTTP/1.1 channel."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.resource = Echo()
        self.site = StreamingSite(self.resource, lambda method, uri, headers: uri == b"/stream", reactor=self.reactor)
        self.channel = self.site.buildProtocol(None)
        self.transport = StringTransport()
        self.channel.makeConnection(self.transport)

    def send(self, data: bytes) -> None:
        self.channel.dataReceived(data)
        self.reactor.advance(0)

    def test_dispatched_before_body(self) -> None:
        """A streamed request is rendered at header time and sees its body chunk by chunk."""
        self.send(b"POST /stream HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        self.assertEqual(len(self.resource.requests), 1)
        self.send(b"3\r\nabc\r\n")
        self.assertIn(b"abc", self.transport.value())
        self.send(b"2\r\nde\r\n0\r\n\r\n")
        self.assertTrue(self.transport.value().endswith(b"[5]\r\n0\r\n\r\n"))

    def test_ordinary_request_buffered(self) -> None:
        """Other requests are buffered and routed after their body, as usual."""
        self.send(b"POST /other HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nab")
        self.assertEqual(self.resource.requests, [])
        self.send(b"c")
        self.assertTrue(self.transport.value().endswith(b"3\r\nabc\r\n3\r\n[3]\r\n0\r\n\r\n"))

    def test_pauses_connection(self) -> None:
        """A consumer that stops taking the body pauses the connection until it resumes."""
        self.send(b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 400000\r\n\r\n")
        request = self.resource.requests[0]
        request.body.pauseProducing()
        self.send(b"x" * 300_000)
        self.assertEqual(self.transport.producerState, "paused")
        request.body.resumeProducing()
        self.assertEqual(self.transport.producerState, "producing")
        self.send(b"x" * 100_000)
        self.assertIn(b"[400000]", self.transport.value())

    def test_early_finish_closes(self) -> None:
        """A response that ends before the body does closes the connection (not reused)."""
        self.send(b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        request = self.resource.requests[0]
        request.unregisterProducer()
        request.finish()
        self.assertTrue(self.transport.disconnecting)

    def test_client_gone(self) -> None:
        """A lost connection reaches the body's consumer."""
        self.send(b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual([f.type for f in self.resource.failures], [ConnectionLost])


class FakeRequest:
    """Enough of a request for :class:`NdjsonStream`."""

    def __init__(self) -> None:
        self.code = 0
        self.headers: dict[bytes, bytes] = {}
        self.written: list[bytes] = []
        self.producer: Any = None
        #: The connection (twisted.web sets it to None once the client has gone).
        self.channel: Any = object()

    def setResponseCode(self, code: int) -> None:
        self.code = code

    def setHeader(self, name: bytes, value: bytes) -> None:
        self.headers[name] = value

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None


class Upstream:
    def __init__(self) -> None:
        self.events: list[str] = []

    def pauseProducing(self) -> None:
        self.events.append("pause")

    def resumeProducing(self) -> None:
        self.events.append("resume")

    def stopProducing(self) -> None:
        self.events.append("stop")


class NdjsonStreamTests(SynchronousTestCase):
    """:class:`NdjsonStream`."""

    def test_lines_and_flow_control(self) -> None:
        """One compact JSON line per record; pause/resume/stop reach the upstream producer."""
        request, upstream = FakeRequest(), Upstream()
        stream = NdjsonStream(request, upstream)  # type: ignore[arg-type]
        self.assertEqual((request.code, request.headers[b"Content-Type"]), (200, b"application/x-ndjson"))
        stream.send({"type": "stdout", "data": "é\n"})
        self.assertEqual(request.written, [b'{"type":"stdout","data":"\\u00e9\\n"}\n'])
        request.producer.pauseProducing()
        request.producer.resumeProducing()
        request.producer.stopProducing()
        self.assertEqual(upstream.events, ["pause", "resume", "stop"])
        stream.close()
        self.assertIsNone(request.producer)
