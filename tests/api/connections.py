"""
HTTP connections to a site in unit tests: a protocol on a ``StringTransport``, closed at the end of the
test unless the server closed it (a streaming response holds its connection until it ends); the
response read back from the transport (:func:`parse_response`); and a streaming site that records the
content files it hands out for request bodies (:class:`RecordingSite`).
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from twisted.internet.error import ConnectionLost
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import Site

from vmservice.api.streaming import StreamingSite


def open_connection(test: SynchronousTestCase, site: Site) -> tuple[Any, StringTransport]:
    """A new connection to ``site``: its HTTP channel and transport; lost when ``test`` ends."""
    channel = site.buildProtocol(None)
    transport = StringTransport()
    channel.makeConnection(transport)

    def close() -> None:
        if not transport.disconnecting:
            channel.connectionLost(Failure(ConnectionLost()))

    test.addCleanup(close)
    return channel, transport


def parse_response(raw: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    """Status, headers and the de-chunked body of one HTTP/1.1 response."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    if headers.get(b"transfer-encoding") != b"chunked":
        return status, headers, rest
    body = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        body += rest[:size]
        rest = rest[size + 2:]
    return status, headers, body


class ContentFile(BytesIO):
    """A request's content file that remembers every byte written to it, also once closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()

    def write(self, data: Any) -> int:
        self.written += data
        return super().write(data)


class RecordingSite(StreamingSite):
    """A streaming site that records the content files twisted.web asks it for (where bodies are stored)."""

    files: list[ContentFile]

    def getContentFile(self, length: int | None) -> ContentFile:
        self.files.append(ContentFile())
        return self.files[-1]
