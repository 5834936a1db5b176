# -*- test-case-name: tests.api.test_request_line -*-
"""
The request line of a request whose headers have arrived but whose body has
not: the one place that reads private attributes of ``twisted.web``.

twisted.web gives a request its method, URI and version only once the whole
body is in (``Request.requestReceived``).  A streamed body must be routed
before that, at header time (``Request.gotLength``), when only the
``HTTPChannel`` knows them, as ``_command``, ``_path`` and ``_version``.
``tests/api/test_request_line.py`` fails loudly if Twisted renames them.
"""

from __future__ import annotations

from typing import Any

#: The private attributes of ``twisted.web.http.HTTPChannel`` read here.
CHANNEL_ATTRIBUTES = ("_command", "_path", "_version")


def request_line(channel: Any) -> tuple[bytes, bytes, bytes] | None:
    """
    Method, URI and version of the request being read on ``channel``;
    ``None`` for a channel that does not keep them (HTTP/2, test doubles).
    """
    try:
        line = tuple(getattr(channel, name) for name in CHANNEL_ATTRIBUTES)
    except AttributeError:
        return None
    method, uri, version = line
    if not (isinstance(method, bytes) and isinstance(uri, bytes) and isinstance(version, bytes)):
        return None
    return method, uri, version


__all__ = ["CHANNEL_ATTRIBUTES", "request_line"]
