# -*- test-case-name: tests.wire.test_shellframes -*-
"""
The frames of an interactive shell: ``type u8 | length u32 (big-endian) |
payload``, pure and stdlib only (the host and the guest share it).

The same framing serves two hops:

- the WebSocket of ``GET /vm/{hostname}/shell`` (one frame per binary
  message, as existing clients send it): :data:`DATA`, :data:`WINDOW_SIZE`,
  :data:`SHUTDOWN`, :data:`HEARTBEAT`, :data:`SESSION_CLOSE`;
- the agent's ``shell`` stream, both ways: host to guest :data:`DATA` (input
  for the terminal) and :data:`WINDOW_SIZE`; guest to host :data:`STARTED`
  ``{"pid": N}`` first (or :data:`REJECTED` ``{"message": ...}``), then
  :data:`DATA` (terminal output) and finally :data:`EXIT`
  ``{"exit_code": N, "signal": name | null}``.

``docs/api.md`` and ``docs/agent-protocol.md`` document both.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

#: Terminal bytes (client to server: input; server to client: output).
DATA = 0x01
#: ``cols u32 | rows u32``: the terminal's size.
WINDOW_SIZE = 0x02
#: Either side stops (empty).
SHUTDOWN = 0x03
#: Client keep-alive (empty; ignored).
HEARTBEAT = 0x04
#: The server's last frame: the shell ended.
SESSION_CLOSE = 0x05
#: Agent stream only, guest to host: the shell runs (JSON ``{"pid": N}``).
STARTED = 0x10
#: Agent stream only, guest to host: the shell exited (JSON ``{"exit_code", "signal"}``).
EXIT = 0x11
#: Agent stream only, guest to host: the request is wrong (JSON ``{"message"}``).
REJECTED = 0x12

#: ``type u8 | length u32``.
HEADER = struct.Struct(">BI")
#: Largest WebSocket message either side sends, header included (what the
#: existing Go proxy reads).
MAX_MESSAGE = 32 * 1024
#: Largest DATA payload in one message.
MAX_DATA = MAX_MESSAGE - HEADER.size

_SIZE = struct.Struct(">II")


class FrameError(ValueError):
    """
    The bytes are not a frame: an oversized length or a malformed payload.
    """


@dataclass(frozen=True)
class Frame:
    """
    One decoded frame.

    :ivar kind: its type byte.
    :ivar payload: its bytes.
    """

    kind: int
    payload: bytes

    def json(self) -> dict[str, Any]:
        """
        The payload as a JSON object (STARTED, EXIT, REJECTED).

        :raises FrameError: it is not one.
        """
        try:
            value = json.loads(self.payload)
        except ValueError:
            raise FrameError("frame payload is not JSON") from None
        if not isinstance(value, dict):
            raise FrameError("frame payload is not a JSON object")
        return value

    def window_size(self) -> tuple[int, int]:
        """
        ``(cols, rows)`` of a WINDOW_SIZE frame.

        :raises FrameError: the payload is not 8 bytes.
        """
        if len(self.payload) != _SIZE.size:
            raise FrameError(f"window size of {len(self.payload)} bytes, not 8")
        cols, rows = _SIZE.unpack(self.payload)
        return cols, rows


def encode_frame(kind: int, payload: bytes = b"") -> bytes:
    """
    One frame.

    :raises FrameError: ``kind`` is not a byte, or ``payload`` is 4 GiB or more.
    """
    if not 0 <= kind <= 0xFF:
        raise FrameError(f"frame type {kind} is not a byte")
    if len(payload) >= 2**32:
        raise FrameError("frame payload too large")
    return HEADER.pack(kind, len(payload)) + payload


def encode_json_frame(kind: int, value: Mapping[str, Any]) -> bytes:
    """A frame whose payload is compact JSON."""
    return encode_frame(kind, json.dumps(value, separators=(",", ":")).encode("utf-8"))


def encode_window_size(cols: int, rows: int) -> bytes:
    """
    A WINDOW_SIZE frame.

    :raises FrameError: a dimension is outside 0 .. 2^32-1.
    """
    if not (0 <= cols < 2**32 and 0 <= rows < 2**32):
        raise FrameError("window dimensions must be 0 .. 2^32-1")
    return encode_frame(WINDOW_SIZE, _SIZE.pack(cols, rows))


def encode_data(data: bytes, limit: int = MAX_DATA) -> list[bytes]:
    """
    ``data`` as DATA frames of at most ``limit`` payload bytes each (none for
    empty ``data``).
    """
    return [encode_frame(DATA, data[i:i + limit]) for i in range(0, len(data), limit)]


def decode_message(message: bytes) -> Frame:
    """
    The frame of one WebSocket message (bytes after the frame are ignored, as
    existing clients do).

    :raises FrameError: the message is shorter than its header says.
    """
    if len(message) < HEADER.size:
        raise FrameError("message shorter than a frame header")
    kind, length = HEADER.unpack_from(message)
    if len(message) < HEADER.size + length:
        raise FrameError("message shorter than its frame")
    return Frame(kind, bytes(message[HEADER.size:HEADER.size + length]))


class FrameDecoder:
    """
    Incremental decoder for a byte stream of frames (the agent stream).

    :param max_payload: the largest payload accepted.
    """

    def __init__(self, max_payload: int = 1024 * 1024) -> None:
        self._buffer = bytearray()
        self._max_payload = max_payload

    def feed(self, data: bytes) -> Iterator[Frame]:
        """
        Add ``data`` and yield every frame it completes.

        :raises FrameError: a length over the limit.
        """
        self._buffer += data
        while len(self._buffer) >= HEADER.size:
            kind, length = HEADER.unpack_from(self._buffer)
            if length > self._max_payload:
                raise FrameError(f"frame payload of {length} bytes is too large")
            end = HEADER.size + length
            if len(self._buffer) < end:
                return
            payload = bytes(self._buffer[HEADER.size:end])
            del self._buffer[:end]
            yield Frame(kind, payload)

    @property
    def partial(self) -> int:
        """Bytes held of an incomplete frame."""
        return len(self._buffer)


__all__ = [
    "DATA",
    "EXIT",
    "HEARTBEAT",
    "MAX_DATA",
    "MAX_MESSAGE",
    "REJECTED",
    "SESSION_CLOSE",
    "SHUTDOWN",
    "STARTED",
    "WINDOW_SIZE",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "decode_message",
    "encode_data",
    "encode_frame",
    "encode_json_frame",
    "encode_window_size",
]
