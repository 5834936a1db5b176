# -*- test-case-name: tests.wire.test_logframes -*-
"""
The frames of a background exec's log, as they travel from the guest to the
host in a ``background`` ``logs`` stream: a pure codec shared by both (stdlib
only, like the rest of :mod:`vmservice.wire`).

A frame is ``kind u8 | id u64 | time_ns u64 | length u32 | payload``
(big-endian):

- :data:`STDOUT`/:data:`STDERR`: ``payload`` is what the process wrote, raw.
- :data:`EXIT`: ``payload`` is JSON ``{"exit_code": N, "signal": "SIGTERM" | null}``;
  the last frame of an exec's log.
- :data:`GAP`: ``payload`` is JSON ``{"dropped_frames": N, "dropped_bytes": N}``:
  frames the reader asked for were evicted from the ring before it read them.
  Its ``id`` is 0: it is not part of the log.

``id`` counts a log's frames from 1 without holes; ``time_ns`` is the guest's
wall clock when the frame was made, in nanoseconds since the Unix epoch.
``docs/agent-protocol.md`` documents the stream around it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Iterator, Optional

#: Frame kinds (the numbers of the exec records they correspond to).
STDOUT = 2
STDERR = 3
EXIT = 4
GAP = 7
KINDS = {STDOUT: "stdout", STDERR: "stderr", EXIT: "exit", GAP: "gap"}

#: ``kind u8 | id u64 | time_ns u64 | length u32``.
_HEADER = struct.Struct(">BQQI")
#: Largest payload a decoder accepts (the guest reads at most 64 KiB at a time).
MAX_PAYLOAD = 1024 * 1024


class FrameError(ValueError):
    """
    The frame stream does not parse: an unknown kind, an oversized payload, a
    control frame whose payload is not the JSON it must be.
    """


@dataclass(frozen=True)
class LogFrame:
    """
    One frame of a background exec's log.

    :ivar kind: one of :data:`KINDS`.
    :ivar id: its place in the log, from 1 (0 for a :data:`GAP`).
    :ivar time_ns: the guest's wall clock when it was made.
    :ivar payload: output bytes, or the JSON of a control frame.
    """

    kind: int
    id: int
    time_ns: int
    payload: bytes = b""

    @property
    def name(self) -> str:
        """``stdout``, ``stderr``, ``exit`` or ``gap``."""
        return KINDS[self.kind]

    def control(self) -> dict[str, Any]:
        """
        The JSON object of an :data:`EXIT` or :data:`GAP` frame.

        :raises FrameError: the payload is not a JSON object.
        """
        try:
            value = json.loads(self.payload)
        except ValueError:
            raise FrameError(f"{self.name} frame payload is not JSON") from None
        if not isinstance(value, dict):
            raise FrameError(f"{self.name} frame payload is not a JSON object")
        return value


def encode_frame(frame: LogFrame) -> bytes:
    """
    ``frame`` on the wire.

    :raises FrameError: an unknown kind, an id or time out of range, a payload
        larger than :data:`MAX_PAYLOAD`.
    """
    if frame.kind not in KINDS:
        raise FrameError(f"unknown frame kind {frame.kind}")
    if not (0 <= frame.id < 2**64 and 0 <= frame.time_ns < 2**64):
        raise FrameError("frame id and time must fit in 64 bits")
    if len(frame.payload) > MAX_PAYLOAD:
        raise FrameError(f"frame payload of {len(frame.payload)} bytes is too large")
    return _HEADER.pack(frame.kind, frame.id, frame.time_ns, len(frame.payload)) + frame.payload


def exit_frame(id: int, time_ns: int, exit_code: int, signal: Optional[str]) -> LogFrame:
    """The :data:`EXIT` frame of a process that ended."""
    payload = json.dumps({"exit_code": exit_code, "signal": signal}, separators=(",", ":")).encode()
    return LogFrame(EXIT, id, time_ns, payload)


def gap_frame(time_ns: int, dropped_frames: int, dropped_bytes: int) -> LogFrame:
    """The :data:`GAP` frame telling a reader what it missed."""
    payload = json.dumps({"dropped_frames": dropped_frames, "dropped_bytes": dropped_bytes}, separators=(",", ":"))
    return LogFrame(GAP, 0, time_ns, payload.encode())


class FrameDecoder:
    """
    Incremental decoder: feed bytes in any fragmentation, take whole frames out.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[LogFrame]:
        """
        Add ``data`` and yield every frame it completes.

        :raises FrameError: an unknown kind or an oversized length.
        """
        self._buffer += data
        while len(self._buffer) >= _HEADER.size:
            kind, id, time_ns, length = _HEADER.unpack_from(self._buffer)
            if kind not in KINDS:
                raise FrameError(f"unknown frame kind {kind}")
            if length > MAX_PAYLOAD:
                raise FrameError(f"frame payload of {length} bytes is too large")
            end = _HEADER.size + length
            if len(self._buffer) < end:
                return
            payload = bytes(self._buffer[_HEADER.size:end])
            del self._buffer[:end]
            yield LogFrame(kind, id, time_ns, payload)

    @property
    def partial(self) -> int:
        """Bytes held of an incomplete frame (non-zero at the end means truncation)."""
        return len(self._buffer)


__all__ = [
    "EXIT",
    "FrameDecoder",
    "FrameError",
    "GAP",
    "KINDS",
    "LogFrame",
    "MAX_PAYLOAD",
    "STDERR",
    "STDOUT",
    "encode_frame",
    "exit_frame",
    "gap_frame",
]
