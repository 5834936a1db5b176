# -*- test-case-name: tests.cluster.kubelet.test_channels -*-
"""
The channels of an exec's WebSocket (``v4.channel.k8s.io`` and
``v5.channel.k8s.io``), as a pure codec: messages in, events out, and back.

Every binary message is one channel's: its first byte names the channel,
the rest is the payload.

======  ==========  ===========================================================
byte    channel     carries
======  ==========  ===========================================================
0       stdin       client → server: bytes for the command's stdin
1       stdout      server → client: the command's stdout
2       stderr      server → client: the command's stderr
3       error       server → client: the exec's end, a ``metav1.Status`` (JSON)
4       resize      client → server: ``{"Width": W, "Height": H}`` (a terminal's size)
255     close       client → server (v5 only): the payload's one byte names a
                    channel the client will send no more on (0: stdin ends)
======  ==========  ===========================================================

Text messages, empty messages and channels a client may not send on are
:class:`Ignored`; a resize that cannot be read is :class:`Malformed` (and
ignored by the session, which logs it).
"""

from __future__ import annotations

import json
from typing import Union

from attrs import frozen

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
#: The protocols served, the preferred first.
PROTOCOLS = (V5, V4)

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
#: The largest payload of a message sent (bigger output is cut into several).
MAX_PAYLOAD = 32 * 1024
#: The longest resize message read.
MAX_RESIZE = 256
#: The largest terminal side accepted.
MAX_SIDE = 65535


@frozen
class Stdin:
    """Bytes for stdin."""

    data: bytes


@frozen
class Resize:
    """The terminal's new size."""

    width: int
    height: int


@frozen
class CloseStream:
    """The client sends no more on ``channel`` (v5)."""

    channel: int


@frozen
class Ignored:
    """A message with nothing to do (text, empty, or on a channel the client does not write)."""

    why: str


@frozen
class Malformed:
    """A message that cannot be read."""

    why: str


Event = Union[Stdin, Resize, CloseStream, Ignored, Malformed]


def choose(offered: list[str]) -> str | None:
    """The protocol served for the client's offer (``Sec-WebSocket-Protocol``), or ``None``."""
    for protocol in PROTOCOLS:
        if protocol in offered:
            return protocol
    return None


def _resize(payload: bytes) -> Event:
    if len(payload) > MAX_RESIZE:
        return Malformed("a resize message is too long")
    try:
        size = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return Malformed("a resize message is not JSON")
    if not isinstance(size, dict):
        return Malformed("a resize message is not an object")
    width, height = size.get("Width"), size.get("Height")
    if not all(type(side) is int and 0 <= side <= MAX_SIDE for side in (width, height)):
        return Malformed(f"a resize needs Width and Height of 0..{MAX_SIDE}")
    assert isinstance(width, int) and isinstance(height, int)
    return Resize(width, height)


def decode(message: bytes, binary: bool, protocol: str) -> Event:
    """What one message from the client says, under ``protocol`` (one of :data:`PROTOCOLS`)."""
    if not binary:
        return Ignored("a text message")
    if not message:
        return Ignored("an empty message")
    channel, payload = message[0], message[1:]
    if channel == STDIN:
        return Stdin(payload) if payload else Ignored("no stdin bytes")
    if channel == RESIZE:
        return _resize(payload)
    if channel == CLOSE and protocol == V5:
        if len(payload) != 1:
            return Malformed("a close message names one channel")
        return CloseStream(payload[0])
    return Ignored(f"channel {channel} is not the client's to write")


def encode(channel: int, data: bytes) -> list[bytes]:
    """The messages that carry ``data`` on ``channel`` (one empty message for no data)."""
    head = bytes([channel])
    if not data:
        return [head]
    return [head + data[start:start + MAX_PAYLOAD] for start in range(0, len(data), MAX_PAYLOAD)]


__all__ = ["CLOSE", "ERROR", "MAX_PAYLOAD", "PROTOCOLS", "RESIZE", "STDERR", "STDIN", "STDOUT", "V4", "V5",
           "CloseStream", "Event", "Ignored", "Malformed", "Resize", "Stdin", "choose", "decode", "encode"]
