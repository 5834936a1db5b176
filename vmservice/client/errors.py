# -*- test-case-name: tests.client.test_errors,tests.integration.test_client -*-
"""
What the client raises: the daemon's refusals (:class:`ApiError`), a daemon
out of reach (:class:`ConnectFailed`), and streams cut short
(:class:`ExecInterrupted`, :class:`WatchInterrupted`).
"""

from __future__ import annotations

import json

from twisted.web.http import RESPONSES

__all__ = ["ApiError", "ConnectFailed", "ExecInterrupted", "WatchInterrupted"]


class ApiError(Exception):
    """
    The daemon answered with a status other than 2xx.

    :ivar status: the HTTP status code.
    :ivar code: the ErrorResponse's stable snake_case ``code``, or ``None``
        when the body had none (or was not an ErrorResponse at all).
    :ivar message: the ErrorResponse's ``error``; for a body that is not
        JSON, its text; for an empty body, the status phrase.
    """

    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message

    @classmethod
    def from_body(cls, status: int, body: bytes) -> "ApiError":
        """
        Build the error from a response body: an ErrorResponse when it is
        one, otherwise whatever text the body holds.
        """
        text = body.decode("utf-8", "replace").strip()
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
            code = decoded.get("code")
            return cls(status, code if isinstance(code, str) and code else None, decoded["error"])
        if not text:
            text = RESPONSES.get(status, b"").decode("ascii") or f"HTTP {status}"
        return cls(status, None, text)


class ConnectFailed(Exception):
    """
    The daemon could not be reached at all (refused, no such socket, no
    such host).

    :ivar url: the address the client was made with.
    :ivar reason: what the operating system said.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(url, reason)
        self.url = url
        self.reason = reason

    def __str__(self) -> str:
        return f"cannot connect to {self.url}: {self.reason}"


class ExecInterrupted(Exception):
    """
    An exec stream ended without its last record (``exit`` or ``error``):
    the connection to the daemon was lost, or the daemon sent something that
    is not an exec record.  What the command did is unknown.
    """


class WatchInterrupted(Exception):
    """
    A watch stream ended without the daemon closing it: the connection was
    lost, or the daemon sent something that is not an event.
    """
