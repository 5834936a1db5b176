# -*- test-case-name: tests.test_quiet_pool -*-
"""
:class:`QuietPool`: an HTTP client connection pool that keeps connections
for reuse and logs nothing about them.

Twisted's pool builds each connection with a factory that logs "Starting
factory" and "Stopping factory" for every connection: a client that calls an
API every few seconds (a cluster node renewing its Lease) would fill the
daemon's log with them.  The factory class is the pool's ``_factory``, the one
private part used here (as in :mod:`vmservice._duplex`).
"""

from __future__ import annotations

from twisted.internet.interfaces import IReactorTime
from twisted.web.client import HTTPConnectionPool, _HTTP11ClientFactory

__all__ = ["QuietPool"]


class _QuietFactory(_HTTP11ClientFactory):
    noisy = False


class QuietPool(HTTPConnectionPool):
    """A persistent connection pool whose connections are not logged."""

    _factory = _QuietFactory

    def __init__(self, reactor: IReactorTime) -> None:
        HTTPConnectionPool.__init__(self, reactor, persistent=True)
