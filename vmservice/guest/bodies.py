# -*- test-case-name: tests.guest.test_secrets,tests.guest.test_userdata,tests.guest.test_login -*-
"""
Requests that carry a body: the host sends all of it and half-closes, the handler
acts once it has it, answers one JSON object and half-closes in turn.

Standard library only, and cheap to import: it runs inside the guest.
"""

from __future__ import annotations

import json
from typing import Any, Generic, Mapping, TypeVar

from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.wire.errors import ResetCode
from vmservice.wire.openheaders.fields import BadHeader

__all__ = ["BodyHandler", "RecordBodyHandler"]

_Header = TypeVar("_Header")


class BodyHandler(StreamHandler):
    """
    Collects the host's body (at most :attr:`limit` bytes), then calls :meth:`complete`.

    A body over the limit resets the stream with BAD_HEADER; an exception in
    :meth:`complete` resets it with INTERNAL_ERROR (the session does that).
    """

    #: The most bytes of body accepted.
    limit = 1 << 20

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._body = bytearray()
        self._refused = False

    def refuse(self, reason: str) -> None:
        """End the stream with BAD_HEADER: the request cannot be served as asked."""
        self._refused = True
        self._body.clear()
        self.stream.reset(ResetCode.BAD_HEADER, reason[:200])

    def data_received(self, data: bytes) -> None:
        self.stream.consumed(len(data))
        if self._refused:
            return
        self._body += data
        if len(self._body) > self.limit:
            self.refuse(f"body larger than {self.limit} bytes")

    def half_closed(self) -> None:
        if not self._refused:
            body, self._body = bytes(self._body), bytearray()
            self.complete(body)

    def complete(self, body: bytes) -> None:
        """The whole body arrived."""

    def reply(self, answer: Mapping[str, Any]) -> None:
        """Send ``answer`` as JSON and half-close."""
        self.stream.write(json.dumps(answer, separators=(",", ":")).encode("utf-8"))
        self.stream.end()


class RecordBodyHandler(BodyHandler, Generic[_Header]):
    """
    A :class:`BodyHandler` whose header is a record of
    :mod:`vmservice.wire.openheaders`: :meth:`start` reads it (:meth:`read`)
    into :attr:`request`, and refuses a bad one with BAD_HEADER and the
    message of its ``BadHeader``.
    """

    #: The header as :meth:`start` read it (a refused stream has none, and no :meth:`complete`).
    request: _Header

    def read(self, header: Mapping[str, Any]) -> _Header:
        """
        The header as a record (its ``from_json``).

        :raises BadHeader: naming the field.
        """
        raise NotImplementedError

    def start(self) -> None:
        try:
            self.request = self.read(self.header)
        except BadHeader as e:
            self.refuse(str(e))
