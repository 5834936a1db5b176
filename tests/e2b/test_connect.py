"""
Tests of :mod:`vmservice.e2b.connect`: envelopes written and read back in
any split, the decoder's refusals, unary errors and their statuses.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.e2b.connect import (END_STREAM, HTTP_STATUS, PREFIX, Code, ConnectError, EnvelopeDecoder,
                                   end_envelope, envelope, error_body, request_message, stream_request)

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                           max_leaves=12)
messages = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


class EnvelopeTests(SynchronousTestCase):
    @given(st.lists(messages, max_size=5), st.integers(min_value=1, max_value=64))
    def test_round_trip(self, sent: list[dict[str, Any]], size: int) -> None:
        """Messages written as envelopes are read back whole, however the bytes are split."""
        data = b"".join(envelope(message) for message in sent) + end_envelope()
        decoder = EnvelopeDecoder()
        read = [item for start in range(0, len(data), size) for item in decoder.feed(data[start:start + size])]
        self.assertEqual([json.loads(item.data) for item in read[:-1]], sent)
        self.assertEqual((read[-1].flags, json.loads(read[-1].data)), (END_STREAM, {}))
        self.assertEqual(decoder.pending, 0)

    def test_end_with_error(self) -> None:
        """An end envelope carries the error the stream ended with."""
        [end] = EnvelopeDecoder().feed(end_envelope(ConnectError(Code.NOT_FOUND, "no such process")))
        self.assertEqual(json.loads(end.data), {"error": {"code": "not_found", "message": "no such process"}})

    def test_refusals(self) -> None:
        """A compressed envelope, and one over the limit before its bytes arrive."""
        with self.assertRaises(ConnectError) as compressed:
            list(EnvelopeDecoder().feed(PREFIX.pack(1, 2) + b"{}"))
        self.assertEqual(compressed.exception.code, Code.INVALID_ARGUMENT)
        with self.assertRaises(ConnectError) as large:
            list(EnvelopeDecoder(limit=10).feed(PREFIX.pack(0, 11)))
        self.assertEqual(large.exception.code, Code.RESOURCE_EXHAUSTED)

    @given(st.binary(max_size=40))
    def test_stream_request_any_bytes(self, body: bytes) -> None:
        """Any body is one JSON object's envelope or an ``invalid_argument``/``resource_exhausted``."""
        try:
            self.assertIsInstance(stream_request(body, limit=32), dict)
        except ConnectError as error:
            self.assertIn(error.code, (Code.INVALID_ARGUMENT, Code.RESOURCE_EXHAUSTED))

    def test_stream_request(self) -> None:
        """Exactly one message: two, an end envelope or a trailing fragment are refused."""
        self.assertEqual(stream_request(envelope({"pid": 3})), {"pid": 3})
        for body in (b"", envelope({}) * 2, end_envelope(), envelope({}) + b"\x00", envelope({"a": 1})[:-1]):
            with self.assertRaises(ConnectError):
                stream_request(body)


class UnaryTests(SynchronousTestCase):
    @given(st.binary(max_size=40))
    def test_request_message_any_bytes(self, body: bytes) -> None:
        """Any body is a JSON object or an ``invalid_argument``."""
        try:
            self.assertIsInstance(request_message(body), dict)
        except ConnectError as error:
            self.assertEqual(error.code, Code.INVALID_ARGUMENT)

    def test_empty_is_empty_message(self) -> None:
        self.assertEqual(request_message(b""), {})

    def test_statuses(self) -> None:
        """Every code has Connect's status; the body is Connect's error."""
        self.assertEqual(set(HTTP_STATUS), set(Code))
        error = ConnectError(Code.ALREADY_EXISTS, "exists")
        self.assertEqual((error.status, json.loads(error_body(error))), (409, {"code": "already_exists",
                                                                              "message": "exists"}))
        self.assertEqual(ConnectError(Code.UNIMPLEMENTED, "").status, 501)
