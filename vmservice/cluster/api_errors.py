# -*- test-case-name: tests.cluster.test_api_client -*-
"""
What a call of the Kubernetes API can end in, as typed errors: the API
server's ``Status`` answers (:class:`NotFound`, :class:`Conflict`,
:class:`Forbidden`, :class:`Gone`, :class:`Unauthorized`, any other
:class:`ApiError`), no answer (:class:`Unavailable`), or an answer that is
not what was asked for (:class:`BadResponse`: too large, not JSON, an object
of the wrong kind).  Nothing the server sends is trusted beyond a bounded,
printable excerpt of its message.
"""

from __future__ import annotations

import json

#: The most characters of a server's message kept in an error (and so in a log line).
MAX_MESSAGE = 300


def excerpt(text: str) -> str:
    """``text`` as one printable line of at most :data:`MAX_MESSAGE` characters."""
    line = "".join(c if c.isprintable() else " " for c in text)
    line = " ".join(line.split())
    return line if len(line) <= MAX_MESSAGE else line[:MAX_MESSAGE] + "…"


class ApiError(Exception):
    """
    A call of the Kubernetes API failed.

    :ivar status: The HTTP status (0 when there was no answer).
    :ivar reason: The ``Status``'s reason (``NotFound``, ``Conflict`` …) or what happened.
    :ivar message: What the server (or the client) said, one bounded line.
    """

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status, self.reason, self.message = status, excerpt(reason), excerpt(message)
        super().__init__(status, self.reason, self.message)

    def __str__(self) -> str:
        where = f"{self.status} " if self.status else ""
        return f"{where}{self.reason}: {self.message}" if self.message else f"{where}{self.reason}"


class Unauthorized(ApiError):
    """401: the token is not (or no longer) valid."""


class Forbidden(ApiError):
    """403: the node may not do that (the Node authorizer, NodeRestriction)."""


class NotFound(ApiError):
    """404: no such object."""


class Conflict(ApiError):
    """409: the object changed since it was read, or exists already."""


class Gone(ApiError):
    """410: the resourceVersion asked for is too old (a watch relists)."""


class Unavailable(ApiError):
    """No answer: the connection failed or timed out, or the server answered 5xx."""


class BadResponse(ApiError):
    """An answer that is not what was asked for: too large, not JSON, or an object of the wrong kind."""


_BY_STATUS: dict[int, type[ApiError]] = {401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone}


def status_error(status: int, body: bytes) -> ApiError:
    """The error of an answer ``status`` with ``body`` (a ``Status`` object, or anything)."""
    reason, message = f"HTTP {status}", ""
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if isinstance(document, dict) and document.get("kind") == "Status":
        reason = str(document.get("reason") or reason)
        message = str(document.get("message") or "")
    else:
        message = body[:MAX_MESSAGE].decode("utf-8", "replace")
    kind = _BY_STATUS.get(status, Unavailable if status >= 500 else ApiError)
    return kind(status, reason, message)


__all__ = ["ApiError", "BadResponse", "Conflict", "Forbidden", "Gone", "MAX_MESSAGE", "NotFound", "Unauthorized",
           "Unavailable", "excerpt", "status_error"]
