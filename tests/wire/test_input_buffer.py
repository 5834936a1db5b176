"""
Tests for :mod:`vmservice.wire.input_buffer`: input kept as received chunks,
sliced and consumed as if it were one byte string; the hunt for a HELLO.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.wire.connection import Connection, Role
from vmservice.wire.frames import encode_event
from vmservice.wire.input_buffer import InputBuffer

chunks = st.lists(st.binary(min_size=1, max_size=40), max_size=8)


class InputBufferTests(SynchronousTestCase):
    @given(chunks, st.data())
    def test_as_one_string(self, pieces: list[bytes], data: st.DataObject) -> None:
        """Any slice and any discard of the chunks give what the same slice of their concatenation gives."""
        buffer, whole = InputBuffer(), b"".join(pieces)
        for piece in pieces:
            buffer.append(piece)
        self.assertEqual(buffer.size, len(whole))
        consumed = data.draw(st.integers(0, len(whole)))
        buffer.discard(consumed)
        whole = whole[consumed:]
        start = data.draw(st.integers(0, len(whole)))
        end = data.draw(st.integers(start, len(whole)))
        self.assertEqual(buffer.slice(start, end), whole[start:end])
        self.assertEqual(buffer.size, len(whole))

    def test_whole_chunk_not_copied(self) -> None:
        """A slice that is exactly one received chunk is that chunk, not a copy."""
        buffer = InputBuffer()
        first = b"x" * 100
        buffer.append(first)
        buffer.append(b"y")
        self.assertIs(buffer.slice(0, 100), first)

    @given(st.binary(max_size=200))
    def test_hunt_finds_the_hello(self, noise: bytes) -> None:
        """Noise before a HELLO is skipped: the buffer then starts with the HELLO's frame."""
        hello = encode_event(Connection(Role.HOST).hello("1"))
        buffer = InputBuffer()
        buffer.append(noise + hello)
        self.assertTrue(buffer.hunt_hello())
        self.assertEqual(buffer.slice(buffer.size - len(hello), buffer.size), hello)
        if hello not in noise:
            self.assertEqual(buffer.slice(0, buffer.size), hello)

    def test_hunt_keeps_a_possible_start(self) -> None:
        """Without a HELLO, only what could be the start of one is kept, so one split in two is found."""
        hello = encode_event(Connection(Role.HOST).hello("1"))
        buffer = InputBuffer()
        buffer.append(b"n" * 500 + hello[:12])
        self.assertFalse(buffer.hunt_hello())
        self.assertLess(buffer.size, 500)
        buffer.append(hello[12:])
        self.assertTrue(buffer.hunt_hello())
        self.assertEqual(buffer.slice(0, buffer.size), hello)
