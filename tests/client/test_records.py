# -*- test-case-name: tests.client.test_records -*-
"""
Tests for :mod:`vmservice.client.records`: the decoding of exec streams.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.client.errors import ExecInterrupted
from vmservice.client.records import ExecRecord, NdjsonDecoder, decode_exec_record


class RecordTests(SynchronousTestCase):
    """The pure decoding of exec streams."""

    @given(st.binary(max_size=200), st.sampled_from(["stdout", "stderr"]))
    def test_base64_payload_exact(self, data: bytes, kind: str) -> None:
        """A base64 payload decodes to exactly the bytes encoded."""
        record = decode_exec_record({"type": kind, "data": base64.b64encode(data).decode(), "encoding": "base64"})
        self.assertEqual((record.type, record.data), (kind, data))

    @given(st.text(max_size=100))
    def test_text_payload(self, text: str) -> None:
        """A text payload becomes its UTF-8 bytes."""
        self.assertEqual(decode_exec_record({"type": "stdout", "data": text}).data, text.encode("utf-8", "surrogatepass"))

    def test_legacy_frames(self) -> None:
        """Untyped frames are read as the typed records they stand for."""
        self.assertEqual(decode_exec_record({"stdout": "hi"}), ExecRecord("stdout", data=b"hi"))
        self.assertEqual(decode_exec_record({"exit_code": 4}).type, "exit")
        self.assertEqual(decode_exec_record({"error": "gone", "exit_code": 127}).type, "error")
        for bad in ([], {}, {"type": "stdout", "data": "!!", "encoding": "base64"}):
            self.assertRaises(ExecInterrupted, decode_exec_record, bad)

    @given(st.lists(st.dictionaries(st.text(max_size=5), st.integers(), max_size=3), max_size=8), st.data())
    def test_ndjson_any_chunking(self, values: list[dict[str, int]], data: Any) -> None:
        """However the stream is cut into chunks, the same values come out in order."""
        stream = b"".join(json.dumps(v).encode() + b"\n" for v in values)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
        decoder = NdjsonDecoder()
        out: list[Any] = []
        for start, end in zip([0] + cuts, cuts + [len(stream)]):
            out += decoder.feed(stream[start:end])
        out += decoder.finish()
        self.assertEqual(out, values)

    def test_ndjson_long_line(self) -> None:
        """A line longer than the limit is an error, not unbounded memory."""
        decoder = NdjsonDecoder(max_line=10)
        self.assertRaises(ValueError, decoder.feed, b"x" * 11)
