# -*- test-case-name: tests.wire.test_shellframes -*-
"""
Tests for :mod:`vmservice.wire.shellframes`: the shell's
``type u8 | length u32 | payload`` frames.
"""

from __future__ import annotations

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.wire.shellframes import (
    DATA,
    MAX_MESSAGE,
    WINDOW_SIZE,
    Frame,
    FrameDecoder,
    FrameError,
    decode_message,
    encode_data,
    encode_frame,
    encode_json_frame,
    encode_window_size,
)

frames = st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=300)), max_size=20)


class FrameTests(SynchronousTestCase):
    """Encoding and decoding frames."""

    def test_layout(self) -> None:
        """The header is the type byte and a big-endian length (CLIENTS.md §2)."""
        self.assertEqual(encode_frame(DATA, b"ls\r"), b"\x01\x00\x00\x00\x03ls\r")
        self.assertEqual(encode_window_size(80, 24), b"\x02\x00\x00\x00\x08\x00\x00\x00\x50\x00\x00\x00\x18")

    @given(frames, st.lists(st.integers(min_value=1, max_value=50), min_size=1))
    def test_round_trip_any_fragmentation(self, items: list[tuple[int, bytes]], cuts: list[int]) -> None:
        """Frames come out of the stream decoder as they went in, however the bytes are split."""
        data = b"".join(encode_frame(kind, payload) for kind, payload in items)
        decoder = FrameDecoder()
        out = []
        position, index = 0, 0
        while position < len(data):
            size = cuts[index % len(cuts)]
            out += [(f.kind, f.payload) for f in decoder.feed(data[position:position + size])]
            position += size
            index += 1
        self.assertEqual(out, items)
        self.assertEqual(decoder.partial, 0)

    @given(st.integers(0, 255), st.binary(max_size=300), st.binary(max_size=20))
    def test_message_is_its_first_frame(self, kind: int, payload: bytes, trailer: bytes) -> None:
        """A message decodes to its first frame; trailing bytes are ignored."""
        self.assertEqual(decode_message(encode_frame(kind, payload) + trailer), Frame(kind, payload))

    @given(st.binary(max_size=300))
    def test_truncated_message(self, payload: bytes) -> None:
        """A message shorter than its frame is refused."""
        message = encode_frame(DATA, payload + b"x")[:-1]
        self.assertRaises(FrameError, decode_message, message)
        self.assertRaises(FrameError, decode_message, message[:4])

    @given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
    def test_window_size_round_trip(self, cols: int, rows: int) -> None:
        """WINDOW_SIZE carries cols then rows."""
        self.assertEqual(decode_message(encode_window_size(cols, rows)).window_size(), (cols, rows))

    def test_window_size_bad(self) -> None:
        """A WINDOW_SIZE payload that is not 8 bytes, or a dimension out of range, is refused."""
        self.assertRaises(FrameError, Frame(WINDOW_SIZE, b"\x00" * 7).window_size)
        self.assertRaises(FrameError, encode_window_size, -1, 3)
        self.assertRaises(FrameError, encode_window_size, 2**32, 3)

    def test_oversized_length(self) -> None:
        """The stream decoder refuses a length over its limit before buffering it."""
        decoder = FrameDecoder(max_payload=10)
        self.assertRaises(FrameError, list, decoder.feed(encode_frame(DATA, b"x" * 11)))

    @given(st.binary(max_size=3 * MAX_MESSAGE))
    def test_data_split(self, data: bytes) -> None:
        """encode_data makes messages of at most 32 KiB that carry ``data`` in order."""
        messages = encode_data(data)
        self.assertTrue(all(len(m) <= MAX_MESSAGE for m in messages))
        self.assertEqual(b"".join(decode_message(m).payload for m in messages), data)
        self.assertTrue(all(decode_message(m).kind == DATA for m in messages))

    def test_json(self) -> None:
        """JSON frames decode to objects; other payloads are refused."""
        self.assertEqual(decode_message(encode_json_frame(0x10, {"pid": 3})).json(), {"pid": 3})
        self.assertRaises(FrameError, Frame(0x10, b"[1]").json)
        self.assertRaises(FrameError, Frame(0x10, b"{").json)
        self.assertRaises(FrameError, encode_frame, 256)
