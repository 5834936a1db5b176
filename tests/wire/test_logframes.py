# -*- test-case-name: tests.wire.test_logframes -*-
"""Tests for :mod:`vmservice.wire.logframes`: the background exec log frame codec."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.wire.logframes import (
    EXIT,
    GAP,
    KINDS,
    MAX_PAYLOAD,
    STDOUT,
    FrameDecoder,
    FrameError,
    LogFrame,
    encode_frame,
    exit_frame,
    gap_frame,
)

frames = st.builds(
    LogFrame,
    st.sampled_from(sorted(KINDS)),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=300),
)


class RoundTripTests(SynchronousTestCase):
    @given(st.lists(frames, max_size=8), st.data())
    def test_any_fragmentation(self, sent: list[LogFrame], data: st.DataObject) -> None:
        """Whatever the frames and however the bytes are cut, the decoder yields the frames sent."""
        wire = b"".join(encode_frame(f) for f in sent)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=6)))
        decoder = FrameDecoder()
        received = []
        for start, end in zip([0] + cuts, cuts + [len(wire)]):
            received.extend(decoder.feed(wire[start:end]))
        self.assertEqual(received, sent)
        self.assertEqual(decoder.partial, 0)

    def test_control_frames(self) -> None:
        """Exit and gap frames carry their JSON; a gap has id 0."""
        frame = exit_frame(5, 10, 137, "SIGKILL")
        self.assertEqual((frame.kind, frame.control()), (EXIT, {"exit_code": 137, "signal": "SIGKILL"}))
        gap = gap_frame(10, 3, 99)
        self.assertEqual((gap.kind, gap.id, gap.control()), (GAP, 0, {"dropped_frames": 3, "dropped_bytes": 99}))
        self.assertEqual(gap.name, "gap")

    def test_partial(self) -> None:
        """An incomplete frame is held and counted."""
        wire = encode_frame(LogFrame(STDOUT, 1, 2, b"abc"))
        decoder = FrameDecoder()
        self.assertEqual(list(decoder.feed(wire[:-1])), [])
        self.assertEqual(decoder.partial, len(wire) - 1)


class ErrorTests(SynchronousTestCase):
    def test_unknown_kind(self) -> None:
        self.assertRaises(FrameError, encode_frame, LogFrame(9, 1, 1))
        self.assertRaises(FrameError, lambda: list(FrameDecoder().feed(b"\x09" + b"\x00" * 20)))

    def test_too_large(self) -> None:
        self.assertRaises(FrameError, encode_frame, LogFrame(STDOUT, 1, 1, b"x" * (MAX_PAYLOAD + 1)))
        header = bytes([STDOUT]) + b"\x00" * 16 + (MAX_PAYLOAD + 1).to_bytes(4, "big")
        self.assertRaises(FrameError, lambda: list(FrameDecoder().feed(header)))

    def test_out_of_range(self) -> None:
        self.assertRaises(FrameError, encode_frame, LogFrame(STDOUT, 2**64, 1))
        self.assertRaises(FrameError, encode_frame, LogFrame(STDOUT, 1, -1))

    def test_bad_control(self) -> None:
        self.assertRaises(FrameError, LogFrame(EXIT, 1, 1, b"[").control)
        self.assertRaises(FrameError, LogFrame(EXIT, 1, 1, b"[]").control)
