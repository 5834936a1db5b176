# -*- test-case-name: tests.client.test_addresses,tests.integration.test_client -*-
"""
Where a daemon is: the address rule every Slicer client follows (a UNIX
socket or ``http://host:port``) and the agent endpoints it gives.
"""

from __future__ import annotations

import os

from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.internet.interfaces import IReactorUNIX
from twisted.web.client import URI
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer

__all__ = ["DEFAULT_URL", "SOCKET_BASE", "UnixEndpoints", "base_url", "is_unix_socket", "socket_path"]

#: Where a daemon listens when nothing else is configured.
DEFAULT_URL = "http://127.0.0.1:8080"

#: The base URL requests carry over a UNIX socket; the daemon ignores the host.
SOCKET_BASE = "http://localhost"


def is_unix_socket(url: str) -> bool:
    """
    Whether ``url`` names a UNIX socket rather than an HTTP address, by the
    rule shared with the Go and TypeScript clients.
    """
    return url.startswith(("/", "./", "../", "~/", "unix://")) or url.endswith(".sock")


def socket_path(url: str) -> str:
    """
    The file system path of the UNIX socket ``url`` names: ``unix://`` is
    dropped and a leading ``~`` expanded.
    """
    path = url[len("unix://"):] if url.startswith("unix://") else url
    return os.path.expanduser(path)


def base_url(url: str) -> str:
    """``url`` without a trailing slash, with ``http://`` when no scheme is given."""
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")


@implementer(IAgentEndpointFactory)
class UnixEndpoints:
    """Every URI goes to the one UNIX socket (the Host is meaningless there)."""

    def __init__(self, reactor: IReactorUNIX, path: str) -> None:
        self._reactor = reactor
        self._path = path

    def endpointForURI(self, uri: URI) -> UNIXClientEndpoint:
        return UNIXClientEndpoint(self._reactor, self._path)
