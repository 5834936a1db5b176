# -*- test-case-name: tests.wire.test_frames -*-
"""
Tests for :mod:`vmservice.wire.frames`: the byte layout of each event.
"""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.wire.strategies import events
from vmservice.wire.errors import LocalProtocolError, RemoteProtocolError, ResetCode, reset_code_name
from vmservice.wire.events import Data, Event, HalfClose, Hello, Open, Ping, Pong, Reset, WindowUpdate
from vmservice.wire.frames import (
    HEADER_SIZE,
    HELLO_SIGNATURE,
    HELLO_SIGNATURE_OFFSET,
    MAX_PAYLOAD,
    FrameType,
    decode_frame,
    encode_event,
    encode_frame,
    parse_header,
)


def roundtrip(event: Event) -> Event:
    """
    Encode ``event`` and decode the frame again.
    """
    frame = encode_event(event)
    length, frame_type, flags, stream_id = parse_header(frame[:HEADER_SIZE])
    assert length == len(frame) - HEADER_SIZE
    return decode_frame(frame_type, flags, stream_id, frame[HEADER_SIZE:])


class RoundTripTests(SynchronousTestCase):
    """
    Every event survives encoding and decoding unchanged.
    """

    @given(events)
    def test_roundtrip(self, event: Event) -> None:
        """
        Decoding the frame of any valid event gives back an equal event.
        """
        self.assertEqual(roundtrip(event), event)

    def test_largest_data(self) -> None:
        """
        DATA of exactly MAX_PAYLOAD bytes fits one frame; one byte more does not.
        """
        self.assertEqual(roundtrip(Data(1, b"x" * MAX_PAYLOAD)), Data(1, b"x" * MAX_PAYLOAD))
        self.assertRaises(LocalProtocolError, encode_event, Data(1, b"x" * (MAX_PAYLOAD + 1)))

    def test_reset_code_known(self) -> None:
        """
        Reset codes, known or not, decode to plain ints; :func:`reset_code_name` names
        the known ones and writes the others as numbers.
        """
        event = roundtrip(Reset(3, ResetCode.UNKNOWN_OP, "no"))
        assert isinstance(event, Reset)
        self.assertEqual((type(event.code), event.code), (int, 2))
        self.assertEqual(reset_code_name(event.code), "UNKNOWN_OP")
        event = roundtrip(Reset(3, 4000, ""))
        assert isinstance(event, Reset)
        self.assertEqual((type(event.code), event.code), (int, 4000))
        self.assertEqual(reset_code_name(event.code), "4000")


class LayoutTests(SynchronousTestCase):
    """
    The exact bytes documented in docs/agent-protocol.md.
    """

    def test_header(self) -> None:
        """
        A frame is ``length u32 | type u8 | flags u8 | stream u32`` big-endian, then
        the payload.
        """
        self.assertEqual(
            encode_event(Data(0x01020304, b"ab")),
            b"\x00\x00\x00\x02" b"\x03" b"\x00" b"\x01\x02\x03\x04" b"ab",
        )

    def test_hello(self) -> None:
        """
        HELLO is type 1 on stream 0 with magic, version, nonce, echo and the version
        string; its bytes from offset 4 are the hunting signature.
        """
        frame = encode_event(Hello(b"N" * 8, b"E" * 8, "1.2", 1))
        self.assertEqual(
            frame,
            struct.pack(">IBBI", 29, 1, 0, 0) + b"VMSAGENT" + b"\x00\x01" + b"N" * 8
            + b"E" * 8 + b"1.2",
        )
        self.assertEqual(
            frame[HELLO_SIGNATURE_OFFSET : HELLO_SIGNATURE_OFFSET + len(HELLO_SIGNATURE)],
            HELLO_SIGNATURE,
        )

    def test_others(self) -> None:
        """
        OPEN carries compact JSON; WINDOW a u32; HALF_CLOSE nothing; RESET a u32 code
        and the reason; PING and PONG 8 bytes on stream 0.
        """
        self.assertEqual(
            encode_event(Open(1, {"op": "health"})),
            struct.pack(">IBBI", 15, 2, 0, 1) + b'{"op":"health"}',
        )
        self.assertEqual(
            encode_event(WindowUpdate(5, 65536)), struct.pack(">IBBII", 4, 4, 0, 5, 65536)
        )
        self.assertEqual(encode_event(HalfClose(2)), struct.pack(">IBBI", 0, 5, 0, 2))
        self.assertEqual(
            encode_event(Reset(7, ResetCode.UNKNOWN_OP, "x")),
            struct.pack(">IBBII", 5, 6, 0, 7, 2) + b"x",
        )
        self.assertEqual(
            encode_event(Ping(b"12345678")), struct.pack(">IBBI", 8, 7, 0, 0) + b"12345678"
        )
        self.assertEqual(
            encode_event(Pong(b"12345678")), struct.pack(">IBBI", 8, 8, 0, 0) + b"12345678"
        )

    def test_flags_ignored(self) -> None:
        """
        Flags are sent as zero and ignored on receipt, leaving room for extensions.
        """
        frame = encode_frame(FrameType.HALF_CLOSE, 9, b"", flags=0xFF)
        self.assertEqual(decode_frame(*parse_header(frame)[1:], b""), HalfClose(9))


class MalformedFrameTests(SynchronousTestCase):
    """
    Frames that break the layout are the peer's error.
    """

    def assertRejected(self, frame_type: int, stream_id: int, payload: bytes) -> None:
        """
        Decoding the frame raises :class:`RemoteProtocolError`.
        """
        self.assertRaises(RemoteProtocolError, decode_frame, frame_type, 0, stream_id, payload)

    def test_too_long(self) -> None:
        """
        A header that announces more than MAX_PAYLOAD bytes is rejected at once,
        before any payload is buffered.
        """
        self.assertRaises(
            RemoteProtocolError, parse_header, struct.pack(">IBBI", MAX_PAYLOAD + 1, 3, 0, 1)
        )

    def test_unknown_type(self) -> None:
        """
        An unknown frame type is rejected.
        """
        self.assertRejected(0x7F, 1, b"")
        self.assertRejected(0, 1, b"")

    def test_stream_zero(self) -> None:
        """
        Stream frames need a stream id; connection frames must not have one.
        """
        for frame_type in (FrameType.OPEN, FrameType.DATA, FrameType.HALF_CLOSE):
            self.assertRejected(frame_type, 0, b"{}")
        self.assertRejected(FrameType.PING, 1, b"12345678")
        self.assertRejected(FrameType.HELLO, 1, encode_event(Hello(b"a" * 8, b"b" * 8, ""))[10:])

    def test_bad_payloads(self) -> None:
        """
        Payloads of the wrong size or content are rejected.
        """
        self.assertRejected(FrameType.DATA, 1, b"")
        self.assertRejected(FrameType.WINDOW, 1, b"\x00\x00\x00")
        self.assertRejected(FrameType.WINDOW, 1, b"\x00\x00\x00\x00")
        self.assertRejected(FrameType.WINDOW, 1, b"\x80\x00\x00\x00")
        self.assertRejected(FrameType.HALF_CLOSE, 1, b"x")
        self.assertRejected(FrameType.RESET, 1, b"\x00\x00")
        self.assertRejected(FrameType.RESET, 1, b"\x00\x00\x00\x00\xff")
        self.assertRejected(FrameType.RESET, 1, b"\x00" * 4 + b"x" * 1025)
        self.assertRejected(FrameType.OPEN, 1, b"[1]")
        self.assertRejected(FrameType.OPEN, 1, b"{")
        self.assertRejected(FrameType.OPEN, 1, b"\xff")
        self.assertRejected(FrameType.PING, 0, b"1234567")
        self.assertRejected(FrameType.PONG, 0, b"123456789")

    def test_bad_hello(self) -> None:
        """
        A HELLO with the wrong magic, too short, or a bad version string is rejected.
        """
        good = encode_event(Hello(b"a" * 8, b"b" * 8, "v"))[10:]
        self.assertRejected(FrameType.HELLO, 0, b"X" + good[1:])
        self.assertRejected(FrameType.HELLO, 0, good[:20])
        self.assertRejected(FrameType.HELLO, 0, good + b"\xff")
        self.assertRejected(FrameType.HELLO, 0, good + b"x" * 300)

    @given(st.binary(max_size=64))
    def test_garbage_only_remote_errors(self, payload: bytes) -> None:
        """
        Arbitrary payloads of any type either decode or raise
        :class:`RemoteProtocolError`, never anything else.
        """
        for frame_type in range(10):
            for stream_id in (0, 1):
                try:
                    decode_frame(frame_type, 0, stream_id, payload)
                except RemoteProtocolError:
                    pass


class UnencodableEventTests(SynchronousTestCase):
    """
    Events that no frame can carry are our error.
    """

    def test_unencodable(self) -> None:
        """
        Out-of-range ids, sizes and non-JSON headers raise
        :class:`LocalProtocolError`.
        """
        bad: list[object] = [
            Data(0, b"x"),
            Data(1, b""),
            Data(2**32, b"x"),
            WindowUpdate(1, 0),
            WindowUpdate(1, 2**31),
            Open(1, {"a": object()}),
            Open(1, {1: "int key"}),
            Open(1, {"nan": float("nan")}),
            Open(1, ["not", "a", "mapping"]),  # type: ignore[arg-type]
            Reset(1, -1, ""),
            Reset(1, 0, "x" * 1025),
            Ping(b"short"),
            Pong(b"toolong!!"),
            Hello(b"short", b"b" * 8, ""),
            Hello(b"a" * 8, b"b" * 8, "x" * 256),
            Hello(b"a" * 8, b"b" * 8, "", 70000),
            "not an event",
        ]
        for event in bad:
            self.assertRaises(LocalProtocolError, encode_event, event)  # type: ignore[arg-type]
