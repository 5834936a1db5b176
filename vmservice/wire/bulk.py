# -*- test-case-name: tests.wire.test_bulk -*-
"""
The bulk port's codec: what a copy puts on the ``bulk`` virtio-serial port,
which carries one file's bytes at a time without frames (stdlib only, like the
rest of :mod:`vmservice.wire`; ``docs/agent-protocol.md``, "The bulk port").

A transfer is a *token* (:data:`TOKEN_SIZE` random bytes the host chose and
named in the copy's OPEN header, as hex) followed by the file's bytes.  The
port may hand a new connection the tail of an earlier one (a copy cancelled
mid-way), so the receiving end hunts for the token and drops what comes
before it (:class:`TokenHunt`).  An upload's size is said on its stream once
the body ended (:func:`encode_upload_end`).
"""

from __future__ import annotations

import json
import os
from typing import Optional

__all__ = [
    "MAX_END",
    "MAX_STALE",
    "TOKEN_SIZE",
    "TokenHunt",
    "decode_upload_end",
    "encode_upload_end",
    "new_token",
    "parse_token",
]

#: Bytes of a transfer's token.
TOKEN_SIZE = 16

#: Stale bytes a hunt drops before it gives up (far more than the port and
#: QEMU ever hold: a few hundred KiB).
MAX_STALE = 64 * 1024 * 1024

#: Largest upload end message accepted.
MAX_END = 1024


def new_token() -> bytes:
    """A fresh random token."""
    return os.urandom(TOKEN_SIZE)


def parse_token(value: object) -> Optional[bytes]:
    """
    The token of an OPEN header's ``bulk`` field (lowercase hex), or ``None``
    when the field is absent or not a token.
    """
    if not isinstance(value, str) or len(value) != 2 * TOKEN_SIZE:
        return None
    if value.strip("0123456789abcdef"):
        return None
    return bytes.fromhex(value)


class TokenHunt:
    """
    Finds a transfer's start in the bytes a bulk port hands over.

    :meth:`feed` returns ``None`` while the token has not been seen (the
    bytes before it are dropped, counted in :attr:`dropped`), then the bytes
    that followed it; once found, every byte fed is returned as it is.

    :raises ValueError: from :meth:`feed`, after :data:`MAX_STALE` bytes
        without the token.
    """

    def __init__(self, token: bytes, max_stale: int = MAX_STALE) -> None:
        if len(token) != TOKEN_SIZE:
            raise ValueError(f"a token has {TOKEN_SIZE} bytes")
        self._token = token
        self._max_stale = max_stale
        self._tail = b""
        self.found = False
        self.dropped = 0

    def feed(self, data: bytes) -> Optional[bytes]:
        """The transfer's bytes in ``data``, or ``None`` while hunting."""
        if self.found:
            return data
        buffer = self._tail + bytes(data)
        at = buffer.find(self._token)
        if at >= 0:
            self.found = True
            self.dropped += at
            self._tail = b""
            return buffer[at + TOKEN_SIZE:]
        keep = min(len(buffer), TOKEN_SIZE - 1)
        self.dropped += len(buffer) - keep
        self._tail = buffer[len(buffer) - keep:]
        if self.dropped > self._max_stale:
            raise ValueError(f"no transfer start in {self.dropped} bytes")
        return None


def encode_upload_end(size: int) -> bytes:
    """What the host sends on an upload's stream once the body went out on the port."""
    if size < 0:
        raise ValueError("a size is not negative")
    return json.dumps({"size": size}, separators=(",", ":")).encode("utf-8")


def decode_upload_end(data: bytes) -> int:
    """
    The body's size from an upload's end message.

    :raises ValueError: not ``{"size": N}`` with N a byte count.
    """
    if len(data) > MAX_END:
        raise ValueError("the end message is too long")
    value = json.loads(data.decode("utf-8"))
    if not isinstance(value, dict) or set(value) != {"size"}:
        raise ValueError("the end message is not {\"size\": N}")
    size = value["size"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError("the end message's size is not a byte count")
    return size
