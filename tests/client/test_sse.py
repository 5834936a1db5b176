# -*- test-case-name: tests.client.test_sse -*-
"""
Tests for :mod:`vmservice.client.sse`: the decoding of Server-Sent Events.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.client.sse import SseDecoder


_event_data = st.fixed_dictionaries({"type": st.sampled_from(["create", "write", "overflow"]),
                                     "path": st.text(max_size=20), "size": st.integers(0, 2**40),
                                     "isDir": st.booleans()})


class SseTests(SynchronousTestCase):
    """The pure decoding of watch streams (Server-Sent Events)."""

    @given(st.lists(st.tuples(_event_data, st.booleans()), max_size=8), st.sampled_from([b"\n", b"\r\n"]), st.data())
    def test_any_chunking(self, items: list[tuple[dict[str, Any], bool]], newline: bytes, data: Any) -> None:
        """
        However the stream is cut, with LF or CRLF line ends and heartbeat comments
        between events, the events come out in order, their ids from the id lines.
        """
        from vmservice.api.sse import HEARTBEAT, sse_event

        stream = b": opened" + newline + newline
        expected = []
        for number, (fields, heartbeat) in enumerate(items, start=7):
            stream += sse_event(number, fields).replace(b"\n", newline)
            if heartbeat:
                stream += HEARTBEAT.replace(b"\n", newline)
            expected.append({**fields, "id": number})
        cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
        decoder = SseDecoder()
        out: list[Any] = []
        for start, end in zip([0] + cuts, cuts + [len(stream)]):
            out += decoder.feed(stream[start:end])
        self.assertEqual(out, expected)

    def test_fields(self) -> None:
        """The JSON's own id wins; data lines join with a newline; event and retry lines are skipped."""
        decoder = SseDecoder()
        self.assertEqual(decoder.feed(b'id: 3\nevent: watch\nretry: 10\ndata: {"id": 9,\ndata:"a":1}\n\n'),
                         [{"id": 9, "a": 1}])
        self.assertEqual(decoder.feed(b'data: {"b":2}\n\n'), [{"b": 2, "id": 3}])
        self.assertEqual(SseDecoder().feed(b'data: {"c":3}\n\n'), [{"c": 3}])

    def test_refused(self) -> None:
        """Data that is not a JSON object, and a line over the limit, are errors."""
        self.assertRaises(ValueError, SseDecoder().feed, b"data: [1]\n\n")
        self.assertRaises(ValueError, SseDecoder().feed, b"data: nope\n\n")
        self.assertRaises(ValueError, SseDecoder(max_line=10).feed, b"data: " + b"x" * 11)
