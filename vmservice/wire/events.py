# -*- test-case-name: tests.wire.test_frames -*-
"""
The events of the agent wire protocol.

One frozen dataclass per kind of frame: :meth:`Connection.send
<vmservice.wire.connection.Connection.send>` takes them and
:meth:`Connection.next_event <vmservice.wire.connection.Connection.next_event>`
returns them, as h11's and wsproto's events do.  Each event is exactly what one frame
carries, so encoding and decoding are symmetric (see :mod:`vmservice.wire.frames`).
Stdlib only: the guest imports this module.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping, Union

from vmservice.wire.errors import ResetCode

#: The protocol version this codec speaks (u16 in HELLO).
PROTOCOL_VERSION = 1

#: Length of a session nonce, and of PING/PONG's opaque payload.
NONCE_SIZE = 8
OPAQUE_SIZE = 8

#: The echo of a HELLO that answers no one yet.
NO_NONCE = bytes(NONCE_SIZE)


class Sentinel(enum.Enum):
    """
    Values :meth:`~vmservice.wire.connection.Connection.next_event` returns when it
    has no event.
    """

    #: More bytes are needed before the next event can be parsed.
    NEED_DATA = "NEED_DATA"


NEED_DATA = Sentinel.NEED_DATA


@dataclasses.dataclass(frozen=True)
class Hello:
    """
    Announces a session of the sender and acknowledges the receiver's.

    Each side picks a random :attr:`nonce` for each session (a fresh
    :class:`~vmservice.wire.connection.Connection`).  A side knows the link is
    established once the peer's latest HELLO echoes its own nonce; a HELLO with a
    nonce it has not seen before means the peer started over, so every stream of the
    old session is gone.  This is how each side notices a fresh connection even when
    the transport (a virtio-serial port) cannot tell it.

    :ivar nonce: the sender's session nonce (8 bytes).
    :ivar echo: the receiver's nonce as last seen by the sender, or :data:`NO_NONCE`.
    :ivar agent_version: the sender's software version, for the health report and logs.
    :ivar protocol_version: the wire protocol version; only :data:`PROTOCOL_VERSION`
        is accepted.
    """

    nonce: bytes
    echo: bytes
    agent_version: str
    protocol_version: int = PROTOCOL_VERSION


@dataclasses.dataclass(frozen=True)
class Open:
    """
    Opens a stream.  The host opens odd ids, the guest even ids.

    :ivar stream_id: the new stream's id, greater than every id its opener used before.
    :ivar header: a JSON object saying what the stream is for, e.g. ``{"op": "health"}``.
    """

    stream_id: int
    header: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Data:
    """
    Bytes on a stream, within the credit the receiver granted.

    :ivar stream_id: the stream.
    :ivar data: the bytes; never empty.  A large ``send`` is split into frames of at
        most :data:`~vmservice.wire.frames.MAX_PAYLOAD` bytes, each its own event on
        the receiving side.
    """

    stream_id: int
    data: bytes


@dataclasses.dataclass(frozen=True)
class WindowUpdate:
    """
    Grants the receiver of this frame ``increment`` more bytes of credit on a stream.

    :ivar stream_id: the stream.
    :ivar increment: 1 to 2**31 - 1 bytes.
    """

    stream_id: int
    increment: int


@dataclasses.dataclass(frozen=True)
class HalfClose:
    """
    The sender will send no more DATA on this stream; it may still receive.

    :ivar stream_id: the stream.
    """

    stream_id: int


@dataclasses.dataclass(frozen=True)
class Reset:
    """
    Aborts a stream in both directions at once.

    :ivar stream_id: the stream.
    :ivar code: why, usually a :class:`~vmservice.wire.errors.ResetCode`; unknown
        codes are kept as plain ints.
    :ivar reason: a short human-readable explanation (at most 1024 bytes of UTF-8).
    """

    stream_id: int
    code: int = ResetCode.CANCEL
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class Ping:
    """
    Asks the peer to answer with a :class:`Pong` carrying the same opaque bytes.

    :ivar opaque: 8 bytes chosen by the sender.
    """

    opaque: bytes


@dataclasses.dataclass(frozen=True)
class Pong:
    """
    Answers a :class:`Ping`.

    :ivar opaque: the 8 bytes of the ping being answered.
    """

    opaque: bytes


#: Every event that maps to one frame.
Event = Union[Hello, Open, Data, WindowUpdate, HalfClose, Reset, Ping, Pong]

#: Events that belong to a stream (they have a ``stream_id``).
StreamEvent = Union[Open, Data, WindowUpdate, HalfClose, Reset]
