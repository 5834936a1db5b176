# -*- test-case-name: tests.e2b.test_connect -*-
"""
Connect RPC's wire, as envd speaks it with the JSON codec over HTTP/1.1
(pure: bytes in, messages out; nothing here knows a request).

A unary call is ``POST /<package.Service>/<Method>`` with one JSON message
as its body, answered 200 with one JSON message, or with a non-2xx status
and :func:`error_body`.  A server-streaming call's request and response are
``application/connect+json`` *envelopes*: ``[flags:1][length:4, big
endian][JSON]``, a response ending with an end envelope (flag
:data:`END_STREAM`) holding ``{}`` or ``{"error": ...}``.

:class:`ConnectError` is the one failure the services raise; its
:class:`Code` decides the unary status (:data:`HTTP_STATUS`, Connect's
table).  :class:`EnvelopeDecoder` reads envelopes with a bound on each.
"""

from __future__ import annotations

import json
import struct
from enum import Enum
from typing import Any, Iterator, Mapping

from attrs import frozen

#: The flag of a compressed envelope (never sent; refused when received).
COMPRESSED = 0x01
#: The flag of a stream's end envelope.
END_STREAM = 0x02
#: The length of an envelope's prefix.
PREFIX = struct.Struct(">BI")
#: The largest message accepted in one envelope (a request of envd's is far smaller).
MAX_MESSAGE = 1024 * 1024

#: The content type of a unary call's request and answer.
UNARY_TYPE = b"application/json"
#: The content type of a streaming call's request and answer.
STREAM_TYPE = b"application/connect+json"


class Code(str, Enum):
    """Connect's error codes (the gRPC codes, in snake case)."""

    CANCELED = "canceled"
    UNKNOWN = "unknown"
    INVALID_ARGUMENT = "invalid_argument"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    NOT_FOUND = "not_found"
    ALREADY_EXISTS = "already_exists"
    PERMISSION_DENIED = "permission_denied"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    FAILED_PRECONDITION = "failed_precondition"
    ABORTED = "aborted"
    OUT_OF_RANGE = "out_of_range"
    UNIMPLEMENTED = "unimplemented"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"
    DATA_LOSS = "data_loss"
    UNAUTHENTICATED = "unauthenticated"


#: The status of a unary call that fails with each code (Connect's protocol).
HTTP_STATUS: Mapping[Code, int] = {
    Code.CANCELED: 499, Code.UNKNOWN: 500, Code.INVALID_ARGUMENT: 400, Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404, Code.ALREADY_EXISTS: 409, Code.PERMISSION_DENIED: 403, Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400, Code.ABORTED: 409, Code.OUT_OF_RANGE: 400, Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500, Code.UNAVAILABLE: 503, Code.DATA_LOSS: 500, Code.UNAUTHENTICATED: 401,
}


class ConnectError(Exception):
    """
    A call's failure, as Connect reports it.

    :ivar code: its :class:`Code`.
    :ivar message: what went wrong, for a person.
    """

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(code, message)
        self.code, self.message = code, message

    @property
    def status(self) -> int:
        """The status of a unary call failing with it."""
        return HTTP_STATUS[self.code]

    def as_json(self) -> dict[str, str]:
        """Connect's error object."""
        return {"code": self.code.value, "message": self.message}


def error_body(error: ConnectError) -> bytes:
    """A unary call's body failing with ``error``."""
    return json.dumps(error.as_json()).encode()


def message_bytes(message: Mapping[str, Any]) -> bytes:
    """One message as compact JSON."""
    return json.dumps(message, separators=(",", ":")).encode()


def envelope(message: Mapping[str, Any]) -> bytes:
    """One message of a stream."""
    data = message_bytes(message)
    return PREFIX.pack(0, len(data)) + data


def end_envelope(error: ConnectError | None = None) -> bytes:
    """The end of a stream: ``{}``, or the error it ended with."""
    data = message_bytes({} if error is None else {"error": error.as_json()})
    return PREFIX.pack(END_STREAM, len(data)) + data


def request_message(body: bytes) -> dict[str, Any]:
    """
    A request's message (a JSON object).

    :raise ConnectError: ``invalid_argument`` for anything else.
    """
    try:
        message = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise ConnectError(Code.INVALID_ARGUMENT, "the message is not JSON") from None
    if not isinstance(message, dict):
        raise ConnectError(Code.INVALID_ARGUMENT, "the message is not a JSON object")
    return message


@frozen
class Envelope:
    """
    One envelope as read.

    :ivar flags: its flags byte.
    :ivar data: its message's bytes.
    """

    flags: int
    data: bytes


class EnvelopeDecoder:
    """
    Envelopes from the bytes of a stream, as they arrive.

    :param limit: the largest message accepted.
    """

    def __init__(self, limit: int = MAX_MESSAGE) -> None:
        self._limit = limit
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[Envelope]:
        """
        The envelopes ``data`` completes.

        :raise ConnectError: ``invalid_argument`` for a compressed envelope,
            ``resource_exhausted`` for one over the limit.
        """
        self._buffer += data
        while len(self._buffer) >= PREFIX.size:
            flags, length = PREFIX.unpack_from(self._buffer)
            if flags & COMPRESSED:
                raise ConnectError(Code.INVALID_ARGUMENT, "compressed messages are not accepted")
            if length > self._limit:
                raise ConnectError(Code.RESOURCE_EXHAUSTED, f"a message is over {self._limit} bytes")
            if len(self._buffer) < PREFIX.size + length:
                return
            data = bytes(self._buffer[PREFIX.size:PREFIX.size + length])
            del self._buffer[:PREFIX.size + length]
            yield Envelope(flags, data)

    @property
    def pending(self) -> int:
        """The bytes of an envelope begun and not ended."""
        return len(self._buffer)


def stream_request(body: bytes, limit: int = MAX_MESSAGE) -> dict[str, Any]:
    """
    The one message of a server-streaming call's request body.

    :raise ConnectError: ``invalid_argument`` unless the body is exactly one
        envelope of a JSON object.
    """
    decoder = EnvelopeDecoder(limit)
    envelopes = list(decoder.feed(body))
    if len(envelopes) != 1 or decoder.pending or envelopes[0].flags & END_STREAM:
        raise ConnectError(Code.INVALID_ARGUMENT, "a streaming request holds exactly one message")
    return request_message(envelopes[0].data)


__all__ = [
    "COMPRESSED", "Code", "ConnectError", "END_STREAM", "Envelope", "EnvelopeDecoder", "HTTP_STATUS", "MAX_MESSAGE",
    "PREFIX", "STREAM_TYPE", "UNARY_TYPE", "end_envelope", "envelope", "error_body", "message_bytes",
    "request_message", "stream_request",
]
