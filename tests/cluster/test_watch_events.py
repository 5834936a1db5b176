"""
Tests for :mod:`vmservice.cluster.watch_events`: the watch stream decoder,
with properties over arbitrary chunkings of a stream.
"""

from __future__ import annotations

import json

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.cluster.watch_events import WatchDecodeError, WatchDecoder, WatchEvent, parse_event

_NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_EVENTS = st.lists(st.builds(
    lambda kind, name, version: {"type": kind, "object": {"kind": "Pod", "metadata": {
        "name": name, "resourceVersion": str(version)}}},
    st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]), _NAMES, st.integers(1, 10**9)), max_size=12)


def _stream(events: list[dict[str, object]]) -> bytes:
    return b"".join(json.dumps(event).encode() + b"\n" for event in events)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(data[start:point])
        start = point
    return [*pieces, data[start:]]


class DecoderPropertyTests(SynchronousTestCase):
    """Whatever pieces a stream arrives in, the same events come out."""

    @given(_EVENTS, st.lists(st.integers(0, 4000), max_size=30))
    def test_chunking_invariant(self, events: list[dict[str, object]], cuts: list[int]) -> None:
        """Any chunking of a stream gives the events of the stream, in order."""
        data = _stream(events)
        decoder = WatchDecoder()
        decoded = [event for piece in _cut(data, cuts) for event in decoder.feed(piece)] + decoder.end()
        self.assertEqual([(e.type, e.object) for e in decoded], [(e["type"], e["object"]) for e in events])

    @given(st.integers(1, 200), st.lists(st.integers(0, 400), max_size=10))
    def test_oversize_refused(self, size: int, cuts: list[int]) -> None:
        """A line over the bound is refused however it is cut, before its end arrives."""
        line = json.dumps({"type": "ADDED", "object": {"pad": "x" * (size + 64)}}).encode()
        decoder = WatchDecoder(max_line=size + 40)
        with self.assertRaises(WatchDecodeError):
            for piece in _cut(line, cuts):
                decoder.feed(piece)


class DecoderTests(SynchronousTestCase):
    """Single cases of the decoder."""

    def test_blank_lines_skipped(self) -> None:
        """Blank lines (keep-alives) give no event."""
        self.assertEqual(WatchDecoder().feed(b"\n \n"), [])

    def test_malformed(self) -> None:
        """Not JSON, not an object, an unknown type, an object that is no mapping: refused."""
        for line in (b"{nope", b"[1]", b'{"type": "EXPLODED", "object": {}}', b'{"type": "ADDED", "object": 3}'):
            self.assertRaises(WatchDecodeError, WatchDecoder().feed, line + b"\n")

    def test_last_line_without_newline(self) -> None:
        """A last line without a newline is an event at the end; a cut one is refused."""
        decoder = WatchDecoder()
        self.assertEqual(decoder.feed(b'{"type": "ADDED", "object": {}}'), [])
        self.assertEqual(decoder.end(), [WatchEvent("ADDED", {})])
        decoder.feed(b'{"type": "ADD')
        self.assertRaises(WatchDecodeError, decoder.end)

    def test_expired(self) -> None:
        """An ERROR event with a Status of code 410 is an expiry; others are not."""
        gone = parse_event(b'{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}')
        self.assertTrue(gone.expired)
        self.assertFalse(parse_event(b'{"type": "ERROR", "object": {"kind": "Status", "code": 500}}').expired)
        self.assertFalse(parse_event(b'{"type": "ADDED", "object": {"kind": "Status", "code": 410}}').expired)

    def test_resource_version(self) -> None:
        """The object's resourceVersion when it is a non-empty string."""
        self.assertEqual(WatchEvent("ADDED", {"metadata": {"resourceVersion": "12"}}).resource_version, "12")
        for metadata in ({}, {"resourceVersion": 12}, {"resourceVersion": ""}, "x"):
            self.assertIsNone(WatchEvent("ADDED", {"metadata": metadata}).resource_version)
