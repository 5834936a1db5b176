"""
Streamed request bodies and NDJSON responses (:mod:`vmservice.api.streaming`):
:class:`RequestBody` flow control, :class:`StreamingRequest` on a real
``HTTPChannel`` over a ``StringTransport`` (dispatch at header time, the body
in chunks, the connection paused and resumed), and :class:`NdjsonStream`.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from hypothesis import given, strategies as st
from twisted.internet.error import ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from tests.api.connections import RecordingSite, open_connection
from vmservice.api.ndjson import NdjsonStream
from vmservice.api.request_body import RequestBody
from vmservice.api.streaming import BodyPlan, StreamingSite, request_body
from vmservice.errors import BodyTooLarge, Unauthorized


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
        self.site = StreamingSite(self.resource, lambda method, uri, headers, length: BodyPlan(streamed=uri == b"/stream"),
                                  reactor=self.reactor)
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


class Answer(Resource):
    """Answers a refused request with the refusal's status, any other with the length of its stored body."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Any] = []

    def render(self, request: Any) -> bytes:
        self.requests.append(request)
        if request.refusal is not None:
            request.setResponseCode(getattr(request.refusal, "status", 500))
            return b"refused"
        request.content.seek(0)
        return b"[%d]" % len(request.content.read())


class RefusalTests(SynchronousTestCase):
    """:class:`StreamingRequest` refusing at header time, and cutting a body off at its limit."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.resource = Answer()
        self.plans: list[tuple[bytes, bytes, int | None]] = []

        def plan(method: bytes, uri: bytes, headers: Any, length: int | None) -> BodyPlan:
            self.plans.append((method, uri, length))
            if uri == b"/refused":
                return BodyPlan(refusal=Unauthorized("no token"))
            return BodyPlan(limit=10)

        self.site = RecordingSite(self.resource, plan, reactor=self.reactor)
        self.site.files = []
        self.channel, self.transport = open_connection(self, self.site)

    def send(self, data: bytes) -> None:
        """Data from the client, as a real transport delivers it: none once it is closing or paused."""
        if not self.transport.disconnecting and self.transport.producerState != "paused":
            self.channel.dataReceived(data)
        self.reactor.advance(0)

    def assertAnswered(self, status: int, body: bytes) -> None:
        head, _, rest = self.transport.value().partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 %d " % status), head)
        self.assertIn(body, rest)

    def test_refused_before_body(self) -> None:
        """
        A refused request with a huge declared body is answered at once after its headers, with a few
        bytes of body sent: none of them stored, the connection paused (no more read) and closed.
        """
        self.channel.dataReceived(b"POST /refused HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000000\r\n\r\nabc")
        self.assertEqual(self.plans, [(b"POST", b"/refused", 50_000_000_000)])
        self.assertEqual(self.transport.producerState, "paused")
        self.reactor.advance(0)
        self.assertAnswered(401, b"refused")
        self.assertIn(b"Connection: close", self.transport.value())
        self.assertEqual(self.site.files, [])  # no file to store a body in was even made
        self.assertTrue(self.transport.disconnecting)

    def test_refused_chunked(self) -> None:
        """A refused chunked body is answered at once too, and nothing of it is stored."""
        self.send(b"PUT /refused HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        self.assertAnswered(401, b"refused")
        self.assertEqual(self.site.files, [])
        self.assertTrue(self.transport.disconnecting)

    def test_whole_body_refused_once(self) -> None:
        """A refused request whose whole (small) body came with its headers is answered once, and closed."""
        self.channel.dataReceived(b"POST /refused HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        self.reactor.advance(0)
        self.assertEqual(self.transport.value().count(b"HTTP/1.1 401 "), 1)
        self.assertEqual(len(self.resource.requests), 1)
        self.assertTrue(self.transport.disconnecting)

    def test_refused_without_body(self) -> None:
        """A refused GET is answered once and the connection closed (not reused)."""
        self.send(b"GET /refused HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertAnswered(401, b"refused")
        self.assertEqual(len(self.resource.requests), 1)
        self.assertTrue(self.transport.disconnecting)

    def test_no_continue(self) -> None:
        """A client waiting for 100 Continue gets the refusal instead, so it never sends the body."""
        self.send(b"POST /refused HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n")
        self.assertNotIn(b"100 Continue", self.transport.value())
        self.assertAnswered(401, b"refused")

    def test_continue_when_served(self) -> None:
        """A request that is let through still gets its 100 Continue."""
        self.send(b"POST /ok HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
        self.assertTrue(self.transport.value().startswith(b"HTTP/1.1 100 Continue\r\n\r\n"))
        self.send(b"abc")
        self.assertIn(b"[3]", self.transport.value())

    def test_chunked_cut_off_at_limit(self) -> None:
        """
        A chunked body (no declared length) that passes its limit is cut off there: answered 413 at
        once, never more than the limit stored, the connection closed.
        """
        self.send(b"POST /ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        self.send(b"6\r\nabcdef\r\n")
        self.assertEqual(self.transport.value(), b"")
        self.send(b"6\r\nghijkl\r\n")
        self.assertAnswered(413, b"refused")
        request = self.resource.requests[0]
        self.assertIsInstance(request.refusal, BodyTooLarge)
        self.assertEqual([bytes(f.written) for f in self.site.files], [b"abcdef"])
        self.assertTrue(self.transport.disconnecting)
        self.send(b"6\r\nmnopqr\r\n0\r\n\r\n")
        self.assertEqual(len(self.resource.requests), 1)

    def test_within_limit(self) -> None:
        """Bodies up to the limit, chunked or not, are read whole as usual, and the connection is reused."""
        self.send(b"POST /ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        self.send(b"5\r\nabcde\r\n5\r\nfghij\r\n0\r\n\r\n")
        self.assertIn(b"[10]", self.transport.value())
        self.send(b"POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789")
        self.assertIn(b"[10]", self.transport.value().split(b"[10]", 1)[1])
        self.assertFalse(self.transport.disconnecting)


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
