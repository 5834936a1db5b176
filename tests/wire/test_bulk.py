# -*- test-case-name: tests.wire.test_bulk -*-
"""
Tests for :mod:`vmservice.wire.bulk`: the token hunt (with hypothesis: any
stale prefix, any fragmentation), the token field and the upload's end message.
"""

from __future__ import annotations

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.wire.bulk import (
    TOKEN_SIZE,
    TokenHunt,
    decode_upload_end,
    encode_upload_end,
    new_token,
    parse_token,
)

tokens = st.binary(min_size=TOKEN_SIZE, max_size=TOKEN_SIZE)
cuts = st.lists(st.integers(min_value=1, max_value=40), min_size=1)


def _feed(hunt: TokenHunt, data: bytes, sizes: list[int]) -> tuple[bytes, list[int]]:
    """Feed ``data`` cut in ``sizes`` (cycled); what came out, and the calls that returned ``None``."""
    out, hunting, position, index = b"", [], 0, 0
    while position < len(data):
        piece = data[position:position + sizes[index % len(sizes)]]
        position += len(piece)
        got = hunt.feed(piece)
        if got is None:
            hunting.append(index)
        else:
            out += got
        index += 1
    return out, hunting


class TokenHuntTests(SynchronousTestCase):
    """Finding where a transfer starts."""

    @given(tokens, st.binary(max_size=200), st.binary(max_size=200), cuts)
    def test_stale_bytes_dropped(self, token: bytes, stale: bytes, content: bytes, sizes: list[int]) -> None:
        """Whatever comes before the token is dropped, everything after it is kept, however it is cut."""
        if token in stale + token[:-1]:
            stale = b""  # the stale bytes would hold the token itself
        hunt = TokenHunt(token)
        out, _ = _feed(hunt, stale + token + content, sizes)
        self.assertEqual(out, content)
        self.assertTrue(hunt.found)
        self.assertEqual(hunt.dropped, len(stale))

    @given(tokens, st.binary(max_size=200), cuts)
    def test_without_token_nothing_comes_out(self, token: bytes, stale: bytes, sizes: list[int]) -> None:
        """Bytes without the token are all held back."""
        if token in stale:
            return
        hunt = TokenHunt(token)
        out, _ = _feed(hunt, stale, sizes)
        self.assertEqual(out, b"")
        self.assertFalse(hunt.found)

    def test_too_many_stale_bytes(self) -> None:
        """A hunt gives up after its limit."""
        hunt = TokenHunt(b"t" * TOKEN_SIZE, max_stale=100)
        self.assertIsNone(hunt.feed(b"x" * 100))
        self.assertRaises(ValueError, hunt.feed, b"x" * 100)

    def test_token_size(self) -> None:
        """A token has TOKEN_SIZE bytes."""
        self.assertRaises(ValueError, TokenHunt, b"short")
        self.assertEqual(len(new_token()), TOKEN_SIZE)
        self.assertNotEqual(new_token(), new_token())


class FieldTests(SynchronousTestCase):
    """The header's token and the upload's end message."""

    @given(tokens)
    def test_token_round_trip(self, token: bytes) -> None:
        """A token's hex is its field."""
        self.assertEqual(parse_token(token.hex()), token)

    @given(st.one_of(st.none(), st.integers(), st.text(max_size=40), st.booleans()))
    def test_other_fields(self, value: object) -> None:
        """Anything but 32 lowercase hex digits is no token."""
        if isinstance(value, str) and len(value) == 2 * TOKEN_SIZE and not value.strip("0123456789abcdef"):
            return
        self.assertIsNone(parse_token(value))

    def test_uppercase_refused(self) -> None:
        """Only lowercase hex."""
        self.assertIsNone(parse_token("AB" * TOKEN_SIZE))

    @given(st.integers(min_value=0, max_value=2**63))
    def test_end_round_trip(self, size: int) -> None:
        """The size comes back."""
        self.assertEqual(decode_upload_end(encode_upload_end(size)), size)

    @given(st.binary(max_size=64))
    def test_end_garbage(self, data: bytes) -> None:
        """Any bytes decode to a size or raise ValueError, nothing else."""
        try:
            size = decode_upload_end(data)
        except ValueError:
            return
        self.assertGreaterEqual(size, 0)

    def test_end_refusals(self) -> None:
        """Wrong shapes are refused."""
        for data in (b"[]", b'{"size":-1}', b'{"size":true}', b'{"size":1.5}', b'{"size":1,"x":2}',
                     b"{}", b'{"size":"1"}', b" " * 2000):
            self.assertRaises(ValueError, decode_upload_end, data)
        self.assertRaises(ValueError, encode_upload_end, -1)
