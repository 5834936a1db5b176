"""
Tests for :mod:`vmservice.api.request_line`: the private attributes of
Twisted's HTTPChannel it reads still hold the request line at header time.
"""

from __future__ import annotations

from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.http import HTTPChannel, Request

from vmservice.api.request_line import request_line


class _Spy(Request):
    """Records what :func:`request_line` sees when the headers are in."""

    seen: list[object] = []

    def gotLength(self, length: int | None) -> None:
        _Spy.seen.append(request_line(self.channel))
        super().gotLength(length)


class RequestLineTests(SynchronousTestCase):
    def test_line_at_header_time(self) -> None:
        """
        At gotLength, before any body byte, the channel's private attributes
        hold the method, URI and version.  If this fails, Twisted changed
        HTTPChannel: streamed request bodies need a new way to route.
        """
        _Spy.seen = []
        channel = HTTPChannel()
        channel.requestFactory = _Spy  # type: ignore[assignment]
        channel.makeConnection(StringTransport())
        channel.dataReceived(b"POST /vm/x/exec?stdin=true HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n")
        self.assertEqual(_Spy.seen, [(b"POST", b"/vm/x/exec?stdin=true", b"HTTP/1.1")])
        channel.connectionLost(None)  # type: ignore[arg-type]

    def test_other_channels(self) -> None:
        """A channel without those attributes (HTTP/2, a test double) has no line."""
        self.assertIsNone(request_line(object()))
