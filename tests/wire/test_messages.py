# -*- test-case-name: tests.wire.test_messages -*-
"""
Tests for :mod:`vmservice.wire.messages`: streams of ``length u32 | JSON``
messages with hypothesis (round trip under any fragmentation, refusals).
"""

from __future__ import annotations

import json
import struct
from typing import Any

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.wire.messages import MAX_MESSAGE, MessageDecoder, MessageError, encode_message

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63), st.text(max_size=40))
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                       max_leaves=12)
messages = st.lists(st.dictionaries(st.text(max_size=10), _values, max_size=6), max_size=12)


def _decode(data: bytes, cuts: list[int]) -> tuple[list[dict[str, Any]], MessageDecoder]:
    decoder = MessageDecoder()
    out: list[dict[str, Any]] = []
    position, index = 0, 0
    while position < len(data):
        size = cuts[index % len(cuts)]
        out += decoder.feed(data[position:position + size])
        position += size
        index += 1
    return out, decoder


class CodecTests(SynchronousTestCase):
    """The ``length u32 | JSON object`` messages."""

    @given(messages, st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=8))
    def test_round_trip_any_fragmentation(self, values: list[dict[str, Any]], cuts: list[int]) -> None:
        """Messages come out as they went in, however the bytes are split."""
        data = b"".join(encode_message(value) for value in values)
        out, decoder = _decode(data, cuts)
        self.assertEqual(out, values)
        self.assertEqual(decoder.partial, 0)

    @given(messages, st.integers(min_value=1, max_value=200))
    def test_truncation_is_visible(self, values: list[dict[str, Any]], missing: int) -> None:
        """A stream cut short leaves its incomplete message in ``partial``, never a message."""
        data = b"".join(encode_message(value) for value in values) + encode_message({"last": "x" * 300})
        out, decoder = _decode(data[:-missing], [len(data)])
        self.assertEqual(out, values)
        self.assertGreater(decoder.partial, 0)

    def test_layout(self) -> None:
        """The length is big-endian and counts the compact UTF-8 JSON that follows."""
        self.assertEqual(encode_message({"a": "é"}), b"\x00\x00\x00\x0e" + b'{"a":"\\u00e9"}')
        self.assertEqual(encode_message({"t": 1}), b"\x00\x00\x00\x07" + b'{"t":1}')

    @given(st.integers(min_value=MAX_MESSAGE + 1, max_value=2**32 - 1))
    def test_oversized_length_refused_before_payload(self, length: int) -> None:
        """A declared length above the limit is refused from the four length bytes alone."""
        with self.assertRaises(MessageError):
            MessageDecoder().feed(struct.pack(">I", length))

    def test_oversized_message_not_encoded(self) -> None:
        """The encoder refuses what a decoder would refuse."""
        with self.assertRaises(MessageError):
            encode_message({"x": "y" * MAX_MESSAGE})
        self.assertEqual(MessageDecoder(limit=8).feed(encode_message({"a": 1}, limit=8)), [{"a": 1}])

    @given(st.one_of(st.lists(st.integers(), max_size=3), st.integers(), st.text(max_size=5), st.none()))
    def test_not_an_object(self, value: Any) -> None:
        """A payload that is JSON but not an object is refused."""
        body = json.dumps(value).encode()
        with self.assertRaises(MessageError):
            MessageDecoder().feed(struct.pack(">I", len(body)) + body)

    @given(st.binary(min_size=1, max_size=30).filter(lambda raw: not _is_json(raw)))
    def test_not_json(self, raw: bytes) -> None:
        """A payload that is not JSON is refused."""
        with self.assertRaises(MessageError):
            MessageDecoder().feed(struct.pack(">I", len(raw)) + raw)


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True
