# -*- test-case-name: tests.test_duplex -*-
"""
Tests for :mod:`vmservice._duplex`, the one place that reaches into Twisted's
HTTP client: each private part it relies on is checked by name, so that a
Twisted release that changes one fails here, loudly, rather than leaving
``vmctl exec --stdin`` silently waiting for its whole stdin before any output.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IConsumer
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web import _newclient, client
from twisted.web.http_headers import Headers
from twisted.web.iweb import UNKNOWN_LENGTH, IBodyProducer, IResponse
from zope.interface import implementer

from vmservice._duplex import DuplexBody, DuplexFactory, DuplexPool, DuplexProtocol


@implementer(IBodyProducer)
class _EndlessBody:
    """A body that never finishes: stdin still streaming."""

    length = UNKNOWN_LENGTH

    def __init__(self) -> None:
        self.consumer: IConsumer | None = None
        self.stopped = False

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        self.consumer = consumer
        consumer.write(b"first")
        return Deferred()

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        self.stopped = True


class _RecordingEndpoint:
    """An endpoint that connects at once and keeps the factory it was given."""

    def __init__(self) -> None:
        self.factories: list[Factory] = []

    def connect(self, factory: Factory) -> Deferred[Protocol | None]:
        self.factories.append(factory)
        protocol = factory.buildProtocol(None)
        if protocol is not None:
            protocol.makeConnection(StringTransport())
        return succeed(protocol)


class PrivatePartsTests(SynchronousTestCase):
    """Each private name of Twisted that :mod:`vmservice._duplex` uses still exists."""

    def test_pool_factory_attribute(self) -> None:
        """
        ``HTTPConnectionPool._factory`` is the factory class a pool builds its
        connections with, and :class:`DuplexFactory` extends it.
        """
        self.assertIs(client.HTTPConnectionPool._factory, client._HTTP11ClientFactory)
        self.assertTrue(issubclass(DuplexFactory, client._HTTP11ClientFactory))
        self.assertIs(DuplexPool._factory, DuplexFactory)

    def test_factory_keeps_quiescent_callback(self) -> None:
        """
        ``_HTTP11ClientFactory`` is made with the pool's callback and metadata
        and keeps the callback as ``_quiescentCallback``.
        """

        def callback(protocol: Any) -> None:
            pass

        factory = DuplexFactory(callback, "metadata")
        self.assertIs(factory._quiescentCallback, callback)
        protocol = factory.buildProtocol(None)
        self.assertIsInstance(protocol, DuplexProtocol)
        self.assertIs(protocol._quiescentCallback, callback)

    def test_response_deferred_attribute(self) -> None:
        """
        ``HTTP11ClientProtocol.request`` sets ``_responseDeferred``, the
        parser's Deferred for the response.
        """
        self.assertIs(client.HTTP11ClientProtocol, _newclient.HTTP11ClientProtocol)
        protocol = _newclient.HTTP11ClientProtocol()
        protocol.makeConnection(StringTransport())
        self.assertIsNone(protocol._responseDeferred)
        finished = protocol.request(_newclient.Request(b"GET", b"/", Headers({b"host": [b"h"]}), None))
        self.assertIsInstance(protocol._responseDeferred, Deferred)
        protocol.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(finished)


class DuplexTests(SynchronousTestCase):
    """What the duplex classes do with those parts."""

    def test_pool_builds_duplex_connections(self) -> None:
        """A :class:`DuplexPool` connects with :class:`DuplexFactory`, whose connections are :class:`DuplexProtocol`."""
        pool = DuplexPool(MemoryReactorClock())
        endpoint = _RecordingEndpoint()
        connection = self.successResultOf(pool.getConnection(("http", b"h", 80), endpoint))
        [factory] = endpoint.factories
        self.assertIsInstance(factory, DuplexFactory)
        self.assertIsInstance(connection, DuplexProtocol)
        connection.connectionLost(Failure(ConnectionDone()))

    def test_response_before_body_ends(self) -> None:
        """
        The response reaches the :class:`DuplexBody` once its headers are
        parsed, while the body is still being sent; the request itself is not
        answered until then.
        """
        inner = _EndlessBody()
        body = DuplexBody(inner)
        self.assertEqual(body.length, UNKNOWN_LENGTH)
        transport = StringTransport()
        protocol = DuplexProtocol(lambda connection: None)
        protocol.makeConnection(transport)
        finished = protocol.request(_newclient.Request(b"POST", b"/exec", Headers({b"host": [b"h"]}), body))
        self.assertIn(b"first", transport.value())
        self.assertNoResult(body.response)
        protocol.dataReceived(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        response: IResponse = self.successResultOf(body.response)
        self.assertEqual(response.code, 200)
        self.assertNoResult(finished)
        protocol.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(finished)

    def test_other_bodies_untouched(self) -> None:
        """A request without a :class:`DuplexBody` is answered as by the plain protocol."""
        protocol = DuplexProtocol(lambda connection: None)
        protocol.makeConnection(StringTransport())
        finished = protocol.request(_newclient.Request(b"GET", b"/", Headers({b"host": [b"h"]}), None))
        protocol.dataReceived(b"HTTP/1.1 204 No Content\r\n\r\n")
        self.assertEqual(self.successResultOf(finished).code, 204)

    def test_body_passes_producer_calls_on(self) -> None:
        """A :class:`DuplexBody` hands production, pauses and stops to the producer it wraps."""
        calls: list[str] = []

        @implementer(IBodyProducer)
        class Recording:
            length = 3

            def startProducing(self, consumer: IConsumer) -> Deferred[None]:
                calls.append("start")
                return succeed(None)

            def pauseProducing(self) -> None:
                calls.append("pause")

            def resumeProducing(self) -> None:
                calls.append("resume")

            def stopProducing(self) -> None:
                calls.append("stop")

        body = DuplexBody(Recording())
        self.assertEqual(body.length, 3)
        self.successResultOf(body.startProducing(StringTransport()))
        body.pauseProducing()
        body.resumeProducing()
        body.stopProducing()
        self.assertEqual(calls, ["start", "pause", "resume", "stop"])
