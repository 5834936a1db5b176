# -*- test-case-name: tests.wire.test_input_buffer,tests.wire.test_connection -*-
"""
The input of one :class:`~vmservice.wire.connection.Connection` that is not
parsed yet: the chunks as received, never copied together except around a
frame that spans two.

*Hunting.*  Until the peer's first HELLO arrives, input is scanned for
:data:`~vmservice.wire.frames.HELLO_SIGNATURE` and everything before it is
skipped (:meth:`InputBuffer.hunt_hello`): a virtio-serial port may hand a new
connection the tail of what was written for the previous one.

Stdlib only: the guest imports this module.
"""

from __future__ import annotations


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Deque
if TYPE_CHECKING:
    from collections import deque
else:  # collections' own deque, without importing collections (a cold guest's start: see errors.py)
    from _collections import deque

from vmservice.wire.frames import HELLO_SIGNATURE, HELLO_SIGNATURE_OFFSET, MAX_PAYLOAD


class InputBuffer:
    """Bytes received and not consumed: appended whole, sliced and consumed from the front."""

    def __init__(self) -> None:
        # The chunks as received, the bytes of the first already consumed, and the unconsumed total.
        self._chunks: Deque[bytes] = deque()
        self._offset = 0
        self.size = 0

    def append(self, data: bytes) -> None:
        """Keep ``data`` (copied once, as ``bytes``) after what is held."""
        self._chunks.append(bytes(data))
        self.size += len(data)

    def slice(self, start: int, end: int) -> bytes:
        """
        Unconsumed input from ``start`` to ``end`` (``end <= size``), not
        consumed: one copy, or none when it is a whole received chunk.
        """
        chunks = self._chunks
        if start == end:
            return b""
        first = chunks[0]
        begin, finish = self._offset + start, self._offset + end
        if finish <= len(first):
            return first if begin == 0 and finish == len(first) else first[begin:finish]
        parts = []
        for chunk in chunks:
            if begin < len(chunk):
                parts.append(chunk[begin:finish])
            begin = max(0, begin - len(chunk))
            finish -= len(chunk)
            if finish <= 0:
                break
        return b"".join(parts)

    def discard(self, count: int) -> None:
        """Consume ``count`` bytes of input (at most :attr:`size`)."""
        self.size -= count
        chunks = self._chunks
        offset = self._offset + count
        while chunks and offset >= len(chunks[0]):
            offset -= len(chunks.popleft())
        self._offset = offset

    def hunt_hello(self) -> bool:
        """Skip input up to the next HELLO frame; return whether one starts the buffer."""
        # Rare (until the first HELLO): look at all the input as one piece.
        data = self.slice(0, self.size)
        self._chunks.clear()
        self._offset = 0
        if data:
            self._chunks.append(data)
        start = 0
        while True:
            at = data.find(HELLO_SIGNATURE, start + HELLO_SIGNATURE_OFFSET)
            if at < 0:
                keep = len(HELLO_SIGNATURE) + HELLO_SIGNATURE_OFFSET - 1
                self.discard(max(0, self.size - keep))
                return False
            start = at - HELLO_SIGNATURE_OFFSET
            if int.from_bytes(data[start : start + 4], "big") <= MAX_PAYLOAD:
                self.discard(start)
                return True
            start += 1


__all__ = ["InputBuffer"]
