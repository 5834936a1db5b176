# -*- test-case-name: tests.api.test_streaming -*-
"""
NDJSON responses with back-pressure: one JSON object per line, flushed as it
is sent; a client that reads slowly pauses whoever produces the records.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.interfaces import IPushProducer
from twisted.web.server import Request
from zope.interface import implementer


@implementer(IPushProducer)
class NdjsonStream:
    """
    A 200 ``application/x-ndjson`` response: one compact JSON object per line,
    written (and so flushed) as soon as it is sent.

    Registered as the request's push producer: when the client reads slowly the
    HTTP transport pauses us and we pause ``upstream``; when the client goes
    away ``upstream`` is stopped.

    :param request: the response to write.
    :param upstream: where the records come from.
    """

    def __init__(self, request: Request, upstream: IPushProducer) -> None:
        self._request = request
        self._upstream = upstream
        self._closed = False
        request.setResponseCode(200)
        request.setHeader(b"Content-Type", b"application/x-ndjson")
        request.setHeader(b"Cache-Control", b"no-store")
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        request.registerProducer(self, True)

    def send(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one line."""
        if not self._closed:
            self._request.write(json.dumps(record, separators=(",", ":")).encode("utf-8") + b"\n")

    def close(self) -> None:
        """No more records: stop relaying flow control (the caller finishes the request)."""
        if not self._closed:
            self._closed = True
            self._request.unregisterProducer()

    def pauseProducing(self) -> None:
        self._upstream.pauseProducing()

    def resumeProducing(self) -> None:
        self._upstream.resumeProducing()

    def stopProducing(self) -> None:
        if not self._closed:
            self._upstream.stopProducing()


__all__ = ["NdjsonStream"]
