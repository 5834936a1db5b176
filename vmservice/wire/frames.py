# -*- test-case-name: tests.wire.test_frames -*-
"""
The byte layout of the agent wire protocol: one frame per event, pure functions.

Every frame is a 10-byte header followed by its payload (all integers big-endian)::

    length u32 | type u8 | flags u8 | stream_id u32 | payload (length bytes)

``length`` counts the payload only and is at most :data:`MAX_PAYLOAD`.  ``flags`` are
sent as 0 and ignored on receipt (room for later extensions).  The payload of each
type is described in ``docs/agent-protocol.md`` and next to :class:`FrameType`.

:func:`encode_event` and :func:`decode_frame` are symmetric:
``decode_frame(*split(encode_event(e))) == e`` for every valid event, which the tests
check with hypothesis.  State (which stream is open, credit) lives in
:mod:`vmservice.wire.connection`, not here.  Stdlib only: the guest imports this module.
"""

from __future__ import annotations

import struct
# collections.abc's Mapping is _collections_abc's, which the interpreter has loaded as it started
# (importing collections costs a cold guest, which imports this module on its way to its first answer).
from _collections_abc import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

import vmservice.wire.events as events
import vmservice.wire.jsontext as jsontext
from vmservice.wire.errors import LocalProtocolError, RemoteProtocolError
from vmservice.wire.events import Event

HEADER = struct.Struct(">IBBI")
#: Size of the frame header in bytes.
HEADER_SIZE = HEADER.size
#: Largest payload of one frame (64 KiB); larger DATA is split into several frames.
MAX_PAYLOAD = 64 * 1024
#: Largest frame, header included: the most partial input a connection ever buffers.
MAX_FRAME = HEADER_SIZE + MAX_PAYLOAD
#: Largest credit a stream may hold (as in HTTP/2).
MAX_WINDOW = 2**31 - 1
#: Largest stream id.
MAX_STREAM_ID = 2**32 - 1
#: Largest RESET reason, in bytes of UTF-8.
MAX_REASON = 1024
#: Largest agent_version in HELLO, in bytes of UTF-8.
MAX_AGENT_VERSION = 255

#: First bytes of every HELLO payload.
MAGIC = b"VMSAGENT"
_HELLO_FIXED = struct.Struct(">8sH8s8s")
_U32 = struct.Struct(">I")


class FrameType:
    """
    The type byte of a frame, and what its payload holds (plain ints: the guest
    imports the codec on its way to its first answer, without ``enum``).
    """

    #: stream 0; ``magic "VMSAGENT" | protocol_version u16 | nonce 8 | echo 8 | agent_version utf-8``
    HELLO = 0x01
    #: stream != 0; a JSON object in UTF-8 (the stream's header)
    OPEN = 0x02
    #: stream != 0; 1 to MAX_PAYLOAD bytes of stream data
    DATA = 0x03
    #: stream != 0; ``increment u32`` (1 to 2**31 - 1)
    WINDOW = 0x04
    #: stream != 0; empty
    HALF_CLOSE = 0x05
    #: stream != 0; ``code u32 | reason utf-8`` (reason at most 1024 bytes)
    RESET = 0x06
    #: stream 0; 8 opaque bytes
    PING = 0x07
    #: stream 0; the 8 opaque bytes of the ping answered
    PONG = 0x08


#: The 14 bytes found at offset 4 of every HELLO frame (type, flags 0, stream 0,
#: magic).  A connection that waits for the peer's first HELLO skips input until it
#: finds these, so stale bytes of an earlier session never confuse a new one.
HELLO_SIGNATURE = (
    bytes([FrameType.HELLO, 0]) + _U32.pack(0) + MAGIC
)
#: Offset of :data:`HELLO_SIGNATURE` in a HELLO frame (after the length field).
HELLO_SIGNATURE_OFFSET = 4


def encode_frame(frame_type: int, stream_id: int, payload: bytes, flags: int = 0) -> bytes:
    """
    Frame ``payload``: the one place that writes frame headers.

    :param frame_type: a :class:`FrameType`.
    :param stream_id: 0 for connection frames, else the stream.
    :param payload: at most :data:`MAX_PAYLOAD` bytes.
    :param flags: sent as 0 by this version.
    :raises LocalProtocolError: if the payload is too large.
    """
    if len(payload) > MAX_PAYLOAD:
        raise LocalProtocolError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return HEADER.pack(len(payload), frame_type, flags, stream_id) + payload


def parse_header(header: bytes | bytearray | memoryview) -> tuple[int, int, int, int]:
    """
    Split a frame header into ``(length, frame_type, flags, stream_id)``.

    :param header: exactly :data:`HEADER_SIZE` bytes.
    :raises RemoteProtocolError: if the declared length exceeds :data:`MAX_PAYLOAD`;
        checked before any payload is buffered, so a peer cannot make us hold more
        than :data:`MAX_FRAME` bytes of partial input.
    """
    length, frame_type, flags, stream_id = HEADER.unpack(header)
    if length > MAX_PAYLOAD:
        raise RemoteProtocolError(f"frame of {length} bytes exceeds {MAX_PAYLOAD}")
    return length, frame_type, flags, stream_id


def _check_stream_id(stream_id: int) -> None:
    if not 0 < stream_id <= MAX_STREAM_ID:
        raise LocalProtocolError(f"stream id {stream_id} out of range")


def encode_header(header: Mapping[str, Any]) -> bytes:
    """
    Encode an OPEN header as compact JSON.

    :raises LocalProtocolError: if it is not a JSON object with string keys, holds
        values JSON cannot carry (or NaN), or is larger than :data:`MAX_PAYLOAD`.
    """
    if not isinstance(header, Mapping):
        raise LocalProtocolError("an OPEN header must be a mapping")
    try:
        _check_keys(header)
        text = jsontext.dumps(header, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise LocalProtocolError(f"OPEN header is not JSON: {e}") from None
    return text.encode("utf-8")


def _check_keys(value: object) -> None:
    # json.dumps turns int keys into strings: the header would not survive the trip.
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"key {key!r} is not a string")
            _check_keys(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_keys(item)


def encode_event(event: Event) -> bytes:
    """
    Encode one event as one frame.

    Checks only what the frame itself can hold (sizes, ranges); whether the event is
    allowed now is the connection's business.

    :raises LocalProtocolError: if the event cannot be encoded.
    """
    if isinstance(event, events.Data):
        _check_stream_id(event.stream_id)
        if not event.data:
            raise LocalProtocolError("DATA must not be empty")
        return encode_frame(FrameType.DATA, event.stream_id, bytes(event.data))
    if isinstance(event, events.WindowUpdate):
        _check_stream_id(event.stream_id)
        if not 0 < event.increment <= MAX_WINDOW:
            raise LocalProtocolError(f"window increment {event.increment} out of range")
        return encode_frame(FrameType.WINDOW, event.stream_id, _U32.pack(event.increment))
    if isinstance(event, events.Open):
        _check_stream_id(event.stream_id)
        return encode_frame(FrameType.OPEN, event.stream_id, encode_header(event.header))
    if isinstance(event, events.HalfClose):
        _check_stream_id(event.stream_id)
        return encode_frame(FrameType.HALF_CLOSE, event.stream_id, b"")
    if isinstance(event, events.Reset):
        _check_stream_id(event.stream_id)
        if not 0 <= event.code <= 0xFFFFFFFF:
            raise LocalProtocolError(f"reset code {event.code} out of range")
        reason = event.reason.encode("utf-8")
        if len(reason) > MAX_REASON:
            raise LocalProtocolError(f"reset reason longer than {MAX_REASON} bytes")
        return encode_frame(FrameType.RESET, event.stream_id, _U32.pack(event.code) + reason)
    if isinstance(event, (events.Ping, events.Pong)):
        if len(event.opaque) != events.OPAQUE_SIZE:
            raise LocalProtocolError(f"ping payload must be {events.OPAQUE_SIZE} bytes")
        frame_type = FrameType.PING if isinstance(event, events.Ping) else FrameType.PONG
        return encode_frame(frame_type, 0, bytes(event.opaque))
    if isinstance(event, events.Hello):
        if len(event.nonce) != events.NONCE_SIZE or len(event.echo) != events.NONCE_SIZE:
            raise LocalProtocolError(f"HELLO nonces must be {events.NONCE_SIZE} bytes")
        if not 0 <= event.protocol_version <= 0xFFFF:
            raise LocalProtocolError("protocol version out of range")
        version = event.agent_version.encode("utf-8")
        if len(version) > MAX_AGENT_VERSION:
            raise LocalProtocolError(f"agent_version longer than {MAX_AGENT_VERSION} bytes")
        payload = (
            _HELLO_FIXED.pack(MAGIC, event.protocol_version, event.nonce, event.echo) + version
        )
        return encode_frame(FrameType.HELLO, 0, payload)
    raise LocalProtocolError(f"not an event: {event!r}")


def _text(payload: bytes, what: str) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        raise RemoteProtocolError(f"{what} is not UTF-8") from None


def decode_frame(frame_type: int, flags: int, stream_id: int, payload: bytes) -> Event:
    """
    Decode one frame (header already split by :func:`parse_header`) into its event.

    :param flags: ignored by this version.
    :raises RemoteProtocolError: if the frame is malformed: unknown type, a stream id
        where none belongs (or none where one must be), a payload of the wrong size
        or content.
    """
    del flags
    if frame_type in (FrameType.HELLO, FrameType.PING, FrameType.PONG):
        if stream_id != 0:
            raise RemoteProtocolError(f"frame type {frame_type} on stream {stream_id}")
        if frame_type == FrameType.HELLO:
            return _decode_hello(payload)
        if len(payload) != events.OPAQUE_SIZE:
            raise RemoteProtocolError(f"PING/PONG payload must be {events.OPAQUE_SIZE} bytes")
        return events.Ping(payload) if frame_type == FrameType.PING else events.Pong(payload)
    if stream_id == 0:
        raise RemoteProtocolError(f"frame type {frame_type} needs a stream id")
    if frame_type == FrameType.DATA:
        if not payload:
            raise RemoteProtocolError("empty DATA frame")
        return events.Data(stream_id, payload)
    if frame_type == FrameType.WINDOW:
        if len(payload) != _U32.size:
            raise RemoteProtocolError("WINDOW payload must be 4 bytes")
        (increment,) = _U32.unpack(payload)
        if not 0 < increment <= MAX_WINDOW:
            raise RemoteProtocolError(f"window increment {increment} out of range")
        return events.WindowUpdate(stream_id, increment)
    if frame_type == FrameType.OPEN:
        try:
            header = jsontext.loads(_text(payload, "OPEN header"))
        except ValueError:
            raise RemoteProtocolError("OPEN header is not JSON") from None
        if not isinstance(header, dict):
            raise RemoteProtocolError("OPEN header is not a JSON object")
        return events.Open(stream_id, header)
    if frame_type == FrameType.HALF_CLOSE:
        if payload:
            raise RemoteProtocolError("HALF_CLOSE carries no payload")
        return events.HalfClose(stream_id)
    if frame_type == FrameType.RESET:
        if len(payload) < _U32.size or len(payload) - _U32.size > MAX_REASON:
            raise RemoteProtocolError("RESET payload has the wrong size")
        (code,) = _U32.unpack_from(payload)
        return events.Reset(stream_id, code, _text(payload[_U32.size :], "RESET reason"))
    raise RemoteProtocolError(f"unknown frame type {frame_type}")


def _decode_hello(payload: bytes) -> events.Hello:
    if len(payload) < _HELLO_FIXED.size:
        raise RemoteProtocolError("HELLO too short")
    if len(payload) - _HELLO_FIXED.size > MAX_AGENT_VERSION:
        raise RemoteProtocolError("HELLO agent_version too long")
    magic, version, nonce, echo = _HELLO_FIXED.unpack_from(payload)
    if magic != MAGIC:
        raise RemoteProtocolError("HELLO has the wrong magic")
    agent_version = _text(payload[_HELLO_FIXED.size :], "HELLO agent_version")
    return events.Hello(nonce, echo, agent_version, version)
