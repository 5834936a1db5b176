# -*- test-case-name: tests.api.test_streaming,tests.api.test_watching -*-
"""
What every streamed response shares: it is the request's push producer and
passes the client's pace on to where its content comes from.
"""

from __future__ import annotations

from twisted.internet.interfaces import IPushProducer
from twisted.web.server import Request
from zope.interface import implementer


@implementer(IPushProducer)
class UpstreamRelay:
    """
    Registered as ``request``'s push producer: when the client reads slowly the
    HTTP transport pauses us and we pause ``upstream``; when the client goes
    away ``upstream`` is stopped (unless :meth:`close` came first).

    :param request: the response.
    :param upstream: where its content comes from.
    """

    def __init__(self, request: Request, upstream: IPushProducer) -> None:
        self._request = request
        self._upstream = upstream
        self._closed = False
        request.registerProducer(self, True)

    def close(self) -> None:
        """No more content: stop relaying flow control (the caller finishes the request)."""
        if not self._closed:
            self._closed = True
            if self._request.channel is not None:  # None once the client went away
                self._request.unregisterProducer()

    def pauseProducing(self) -> None:
        self._upstream.pauseProducing()

    def resumeProducing(self) -> None:
        self._upstream.resumeProducing()

    def stopProducing(self) -> None:
        if not self._closed:
            self._upstream.stopProducing()


__all__ = ["UpstreamRelay"]
