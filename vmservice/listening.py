# -*- test-case-name: tests.test_listening -*-
"""
The API's listening service, which fails the daemon's start when it cannot
listen: the one place that sets a private attribute of Twisted's
``StreamServerEndpointService``.

By default that service only logs a failure to listen (a port in use, a
socket path that cannot be made), and twistd would run on without an API.
``_raiseSynchronously`` makes ``startService`` raise it instead, so the
operator sees one line and exit status 1.  ``tests/test_listening.py``
fails loudly if Twisted drops the attribute.
"""

from __future__ import annotations

from twisted.application.internet import StreamServerEndpointService
from twisted.internet.interfaces import IProtocolFactory, IStreamServerEndpoint

#: The private attribute set here.
RAISE_ATTRIBUTE = "_raiseSynchronously"


def listening_service(endpoint: IStreamServerEndpoint, factory: IProtocolFactory) -> StreamServerEndpointService:
    """A service that listens on ``endpoint`` with ``factory`` and raises at start when it cannot."""
    service = StreamServerEndpointService(endpoint, factory)
    setattr(service, RAISE_ATTRIBUTE, True)
    return service


__all__ = ["RAISE_ATTRIBUTE", "listening_service"]
