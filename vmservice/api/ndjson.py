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

from .relay import UpstreamRelay


class NdjsonStream(UpstreamRelay):
    """
    A 200 ``application/x-ndjson`` response: one compact JSON object per line,
    written (and so flushed) as soon as it is sent; the client's pace is passed
    to ``upstream`` (:class:`~.relay.UpstreamRelay`).

    :param request: the response to write.
    :param upstream: where the records come from.
    """

    def __init__(self, request: Request, upstream: IPushProducer) -> None:
        request.setResponseCode(200)
        request.setHeader(b"Content-Type", b"application/x-ndjson")
        request.setHeader(b"Cache-Control", b"no-store")
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        super().__init__(request, upstream)

    def send(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one line."""
        if not self._closed:
            self._request.write(json.dumps(record, separators=(",", ":")).encode("utf-8") + b"\n")


__all__ = ["NdjsonStream"]
