# -*- test-case-name: tests.test_duplex -*-
"""
HTTP/1.1 client connections that hand over a response as soon as its headers
are parsed, while the request body is still being sent: what
:meth:`vmservice.client.Client.exec` needs to read a command's output while
its stdin still streams.

Twisted's HTTP client answers a request only once its body has been written
entirely; nothing public reaches the response earlier.  This module is the one
place that reaches into Twisted's HTTP client for it, and
:mod:`tests.test_duplex` fails loudly if Twisted changes any of these private
parts:

- ``HTTPConnectionPool._factory``: the factory class a pool builds its
  connections with, which :class:`DuplexPool` replaces;
- ``twisted.web.client._HTTP11ClientFactory``, which :class:`DuplexFactory`
  extends, and its ``_quiescentCallback``, the pool's callback every
  connection is made with;
- ``twisted.web._newclient.HTTP11ClientProtocol`` and ``Request``, and the
  protocol's ``_responseDeferred``: the parser's Deferred, fired with the
  response once its headers are in, which :class:`DuplexProtocol` passes on
  to a :class:`DuplexBody`.

:class:`WrappedBody`, the request body that passes on another producer's
bytes, is here too, below the client and the command line that both use it.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IAddress, IConsumer, IReactorTime
from twisted.web._newclient import HTTP11ClientProtocol, Request
from twisted.web.client import HTTPConnectionPool, _HTTP11ClientFactory
from twisted.web.iweb import IBodyProducer, IResponse
from zope.interface import implementer

__all__ = ["DuplexBody", "DuplexFactory", "DuplexPool", "DuplexProtocol", "WrappedBody"]


@implementer(IBodyProducer)
class WrappedBody:
    """
    A request body whose bytes are those of another producer: its length,
    starting, pausing, resuming and stopping passed on.  The one such
    wrapper: :class:`DuplexBody` adds the response to it, and
    :class:`vmservice.cli.progress.Counted` counts the bytes on their way.

    :param inner: the producer of the body's bytes.
    """

    def __init__(self, inner: IBodyProducer) -> None:
        self._inner = inner
        self.length = inner.length

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        done: Deferred[None] = self._inner.startProducing(consumer)
        return done

    def pauseProducing(self) -> None:
        self._inner.pauseProducing()

    def resumeProducing(self) -> None:
        self._inner.resumeProducing()

    def stopProducing(self) -> None:
        self._inner.stopProducing()


class DuplexBody(WrappedBody):
    """
    A request body that learns when the response's headers arrive, even while
    it is still being sent (see :class:`DuplexProtocol`).

    :param inner: the producer of the body's bytes.
    :ivar response: fires with the response once its headers are parsed, when
        the request went through a :class:`DuplexProtocol`.
    """

    def __init__(self, inner: IBodyProducer) -> None:
        super().__init__(inner)
        self.response: Deferred[IResponse] = Deferred()


class DuplexProtocol(HTTP11ClientProtocol):
    """
    An HTTP/1.1 client connection that reports a response to the request's
    :class:`DuplexBody` as soon as its headers are parsed.

    :param quiescentCallback: called with the connection whenever it is idle
        again (the pool takes it back).
    """

    def __init__(self, quiescentCallback: Callable[[HTTP11ClientProtocol], object]) -> None:
        # Called by name, not through super(): Twisted's untyped __init__ is
        # then exempt from the type checker's untyped-call rule.
        HTTP11ClientProtocol.__init__(self, quiescentCallback)

    def request(self, request: Request) -> Deferred[IResponse]:
        finished = super().request(request)
        body = request.bodyProducer
        parsed = self._responseDeferred
        if isinstance(body, DuplexBody) and isinstance(parsed, Deferred):

            def tell(response: IResponse) -> IResponse:
                if not body.response.called:
                    body.response.callback(response)
                return response

            parsed.addCallback(tell)
        return finished


class DuplexFactory(_HTTP11ClientFactory):
    """
    Builds a :class:`DuplexProtocol` for each connection of a
    :class:`DuplexPool`, with the pool's callback.
    """

    def buildProtocol(self, addr: IAddress | None) -> HTTP11ClientProtocol:
        return DuplexProtocol(self._quiescentCallback)


class DuplexPool(HTTPConnectionPool):
    """
    A connection pool whose connections are :class:`DuplexProtocol`.

    :param reactor: the ``IReactorTime`` provider that times out idle
        connections.
    :param persistent: whether connections are kept for reuse.
    """

    _factory = DuplexFactory

    def __init__(self, reactor: IReactorTime, persistent: bool = True) -> None:
        HTTPConnectionPool.__init__(self, reactor, persistent)  # by name, as in DuplexProtocol
