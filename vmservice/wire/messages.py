# -*- test-case-name: tests.wire.test_messages -*-
"""
Streams of JSON messages: ``length u32 | compact JSON object``, one after the
other, as a pure codec shared by the host and the guest (stdlib only, like the
rest of :mod:`vmservice.wire`).

A watch stream's guest-to-host bytes are such messages (the first is the reply,
``{"ok": ...}``, then one message per file-system event; see
``docs/agent-protocol.md``).  The framing is the one of a download's head
(:func:`vmservice.wire.payloads.encode_head`), repeated.

:class:`MessageDecoder` takes bytes in any fragmentation and gives whole
messages; it refuses a declared length above its limit before buffering the
payload, and anything that is not a JSON object.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Mapping

#: ``length u32`` before each message.
_LENGTH = struct.Struct(">I")
#: Largest message a decoder accepts by default (a path is at most 4 KiB).
MAX_MESSAGE = 64 * 1024


class MessageError(ValueError):
    """
    The stream does not parse: an oversized length, or a payload that is not a
    JSON object.
    """


def encode_message(value: Mapping[str, Any], limit: int = MAX_MESSAGE) -> bytes:
    """
    One message: ``length u32 | compact JSON`` of ``value``.

    :raises MessageError: the JSON is longer than ``limit`` bytes.
    """
    body = json.dumps(value, separators=(",", ":")).encode("utf-8")
    if len(body) > limit:
        raise MessageError(f"message of {len(body)} bytes is too large")
    return _LENGTH.pack(len(body)) + body


class MessageDecoder:
    """
    Incremental decoder: feed bytes, take whole messages out.

    :param limit: the largest message accepted, in bytes.
    """

    def __init__(self, limit: int = MAX_MESSAGE) -> None:
        self._buffer = bytearray()
        self._limit = limit

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """
        Add ``data`` and return every message it completes, in order.

        :raises MessageError: a declared length above the limit (checked before
            the payload is buffered), or a payload that is not a JSON object.
        """
        self._buffer += data
        messages = []
        while len(self._buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if length > self._limit:
                raise MessageError(f"message of {length} bytes is too large")
            end = _LENGTH.size + length
            if len(self._buffer) < end:
                break
            payload = bytes(self._buffer[_LENGTH.size:end])
            del self._buffer[:end]
            try:
                value = json.loads(payload)
            except ValueError:
                raise MessageError("message is not JSON") from None
            if not isinstance(value, dict):
                raise MessageError("message is not a JSON object")
            messages.append(value)
        return messages

    @property
    def partial(self) -> int:
        """Bytes held of an incomplete message (non-zero at the end means truncation)."""
        return len(self._buffer)


__all__ = ["MAX_MESSAGE", "MessageDecoder", "MessageError", "encode_message"]
