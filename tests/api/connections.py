"""
HTTP connections to a site in unit tests: a protocol on a ``StringTransport``, closed at the end of the
test unless the server closed it (a streaming response holds its connection until it ends).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.error import ConnectionLost
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import Site


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
