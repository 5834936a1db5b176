# -*- test-case-name: tests.wire.test_frames -*-
"""
The events of the agent wire protocol.

One frozen record per kind of frame: :meth:`Connection.send
<vmservice.wire.connection.Connection.send>` takes them and
:meth:`Connection.next_event <vmservice.wire.connection.Connection.next_event>`
returns them, as h11's and wsproto's events do.  Each event is exactly what one frame
carries, so encoding and decoding are symmetric (see :mod:`vmservice.wire.frames`).
Stdlib only: the guest imports this module.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping

from vmservice.wire.errors import ResetCode

#: The protocol version this codec speaks (u16 in HELLO).
PROTOCOL_VERSION = 1

#: Length of a session nonce, and of PING/PONG's opaque payload.
NONCE_SIZE = 8
OPAQUE_SIZE = 8

#: The echo of a HELLO that answers no one yet.
NO_NONCE = bytes(NONCE_SIZE)


if TYPE_CHECKING:
    import enum

    class Sentinel(enum.Enum):
        """
        Values :meth:`~vmservice.wire.connection.Connection.next_event` returns when
        it has no event.
        """

        #: More bytes are needed before the next event can be parsed.
        NEED_DATA = "NEED_DATA"

    NEED_DATA = Sentinel.NEED_DATA

else:

    class Sentinel:
        """
        Values :meth:`~vmservice.wire.connection.Connection.next_event` returns when
        it has no event: one instance, compared with ``is``.  The type checker sees a
        one-member enumeration (so ``event is NEED_DATA`` narrows ``event``); the
        guest, which imports the codec on its way to its first answer, runs without
        ``enum``.
        """

        __slots__ = ()

        def __repr__(self) -> str:
            return "NEED_DATA"

    #: More bytes are needed before the next event can be parsed.
    NEED_DATA = Sentinel()


class _Event:
    """
    Frozen, slotted record: the base of every event.

    Written by hand rather than with :mod:`dataclasses`, whose import (with
    :mod:`inspect`) and per-class code generation cost a third of a second of
    every guest boot under TCG.  Fields are the ``__slots__``; equality, hashing
    and ``repr`` follow them; assigning to a field raises ``AttributeError``.
    """

    __slots__: tuple[str, ...] = ()

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of a frozen event")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of a frozen event")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields()

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash((type(self), self._fields()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


_set = object.__setattr__


class Hello(_Event):
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

    __slots__ = ("nonce", "echo", "agent_version", "protocol_version")
    nonce: bytes
    echo: bytes
    agent_version: str
    protocol_version: int

    def __init__(self, nonce: bytes, echo: bytes, agent_version: str, protocol_version: int = PROTOCOL_VERSION) -> None:
        _set(self, "nonce", nonce)
        _set(self, "echo", echo)
        _set(self, "agent_version", agent_version)
        _set(self, "protocol_version", protocol_version)


class Open(_Event):
    """
    Opens a stream.  The host opens odd ids, the guest even ids.

    :ivar stream_id: the new stream's id, greater than every id its opener used before.
    :ivar header: a JSON object saying what the stream is for, e.g. ``{"op": "health"}``.
    """

    __slots__ = ("stream_id", "header")
    stream_id: int
    header: Mapping[str, Any]

    def __init__(self, stream_id: int, header: Mapping[str, Any]) -> None:
        _set(self, "stream_id", stream_id)
        _set(self, "header", header)


class Data(_Event):
    """
    Bytes on a stream, within the credit the receiver granted.

    :ivar stream_id: the stream.
    :ivar data: the bytes; never empty.  A large ``send`` is split into frames of at
        most :data:`~vmservice.wire.frames.MAX_PAYLOAD` bytes, each its own event on
        the receiving side.
    """

    __slots__ = ("stream_id", "data")
    stream_id: int
    data: bytes

    def __init__(self, stream_id: int, data: bytes) -> None:
        _set(self, "stream_id", stream_id)
        _set(self, "data", data)


class WindowUpdate(_Event):
    """
    Grants the receiver of this frame ``increment`` more bytes of credit on a stream.

    :ivar stream_id: the stream.
    :ivar increment: 1 to 2**31 - 1 bytes.
    """

    __slots__ = ("stream_id", "increment")
    stream_id: int
    increment: int

    def __init__(self, stream_id: int, increment: int) -> None:
        _set(self, "stream_id", stream_id)
        _set(self, "increment", increment)


class HalfClose(_Event):
    """
    The sender will send no more DATA on this stream; it may still receive.

    :ivar stream_id: the stream.
    """

    __slots__ = ("stream_id",)
    stream_id: int

    def __init__(self, stream_id: int) -> None:
        _set(self, "stream_id", stream_id)


class Reset(_Event):
    """
    Aborts a stream in both directions at once.

    :ivar stream_id: the stream.
    :ivar code: why, usually a :class:`~vmservice.wire.errors.ResetCode`; unknown
        codes are kept as plain ints.
    :ivar reason: a short human-readable explanation (at most 1024 bytes of UTF-8).
    """

    __slots__ = ("stream_id", "code", "reason")
    stream_id: int
    code: int
    reason: str

    def __init__(self, stream_id: int, code: int = ResetCode.CANCEL, reason: str = "") -> None:
        _set(self, "stream_id", stream_id)
        _set(self, "code", code)
        _set(self, "reason", reason)


class Ping(_Event):
    """
    Asks the peer to answer with a :class:`Pong` carrying the same opaque bytes.

    :ivar opaque: 8 bytes chosen by the sender.
    """

    __slots__ = ("opaque",)
    opaque: bytes

    def __init__(self, opaque: bytes) -> None:
        _set(self, "opaque", opaque)


class Pong(_Event):
    """
    Answers a :class:`Ping`.

    :ivar opaque: the 8 bytes of the ping being answered.
    """

    __slots__ = ("opaque",)
    opaque: bytes

    def __init__(self, opaque: bytes) -> None:
        _set(self, "opaque", opaque)


#: Every event that maps to one frame.
Event = Hello | Open | Data | WindowUpdate | HalfClose | Reset | Ping | Pong

#: Events that belong to a stream (they have a ``stream_id``).
StreamEvent = Open | Data | WindowUpdate | HalfClose | Reset

__all__ = [
    "Data",
    "Event",
    "HalfClose",
    "Hello",
    "NEED_DATA",
    "NONCE_SIZE",
    "NO_NONCE",
    "OPAQUE_SIZE",
    "Open",
    "PROTOCOL_VERSION",
    "Ping",
    "Pong",
    "Reset",
    "Sentinel",
    "StreamEvent",
    "WindowUpdate",
]
