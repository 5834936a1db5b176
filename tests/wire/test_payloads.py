# -*- test-case-name: tests.wire.test_payloads -*-
"""
Tests for :mod:`vmservice.wire.payloads`: the exec records
(``type u8 | length u32 | payload``) with hypothesis (round trip, any
fragmentation, refusals) and the copy heads.
"""

from __future__ import annotations

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.wire import payloads
from vmservice.wire.payloads import EXIT, RECORD_TYPES, STDOUT, RecordDecoder, RecordError, encode_record

records = st.lists(st.tuples(st.sampled_from(sorted(RECORD_TYPES)), st.binary(max_size=300)), max_size=20)


class CodecTests(SynchronousTestCase):
    """The ``type u8 | length u32 | payload`` records."""

    @given(records, st.lists(st.integers(min_value=1, max_value=50), min_size=1))
    def test_round_trip_any_fragmentation(self, items: list[tuple[int, bytes]], cuts: list[int]) -> None:
        """Records come out as they went in, however the bytes are split."""
        data = b"".join(encode_record(kind, payload) for kind, payload in items)
        decoder = RecordDecoder()
        out = []
        position, index = 0, 0
        while position < len(data):
            size = cuts[index % len(cuts)]
            out += [(r.kind, r.payload) for r in decoder.feed(data[position:position + size])]
            position += size
            index += 1
        self.assertEqual(out, items)
        self.assertEqual(decoder.partial, 0)

    def test_layout(self) -> None:
        """The header is the type byte and a big-endian length."""
        self.assertEqual(encode_record(STDOUT, b"hi"), b"\x02\x00\x00\x00\x02hi")

    @given(st.integers(min_value=0, max_value=255).filter(lambda k: k not in RECORD_TYPES))
    def test_unknown_type(self, kind: int) -> None:
        """An unknown type is refused by both sides."""
        with self.assertRaises(RecordError):
            encode_record(kind)
        with self.assertRaises(RecordError):
            list(RecordDecoder().feed(bytes([kind, 0, 0, 0, 0])))

    def test_oversized(self) -> None:
        """A length beyond the limit is refused before its payload is buffered."""
        with self.assertRaises(RecordError):
            list(RecordDecoder().feed(b"\x02\x7f\xff\xff\xff"))
        with self.assertRaises(RecordError):
            encode_record(STDOUT, bytes(payloads.MAX_RECORD_PAYLOAD + 1))

    @given(st.integers(min_value=0, max_value=2**22), st.integers(min_value=-255, max_value=511),
           st.one_of(st.none(), st.sampled_from(["SIGKILL", "SIGTERM", "SIG64"]), st.text(max_size=8)))
    def test_fast_control_records(self, pid: int, exit_code: int, signal_name: str | None) -> None:
        """STARTED and EXIT built without json are byte for byte the json-encoded records."""
        self.assertEqual(payloads.started_record(pid), payloads.encode_json_record(payloads.STARTED, {"pid": pid}))
        self.assertEqual(payloads.exit_record(exit_code, signal_name),
                         payloads.encode_json_record(EXIT, {"exit_code": exit_code, "signal": signal_name}))

    def test_json_payload(self) -> None:
        """Control records carry a JSON object; anything else is an error."""
        record = next(RecordDecoder().feed(payloads.encode_json_record(EXIT, {"exit_code": 1})))
        self.assertEqual(record.json(), {"exit_code": 1})
        with self.assertRaises(RecordError):
            payloads.Record(EXIT, b"[1]").json()
        with self.assertRaises(RecordError):
            payloads.Record(EXIT, b"{").json()


class HeadTests(SynchronousTestCase):
    """The ``length u32 | JSON`` heads of copies."""

    def test_head_codec(self) -> None:
        """A head is decoded only once complete, and says how many bytes it took."""
        head = payloads.encode_head({"ok": True, "result": {"n": 1}})
        for cut in range(len(head)):
            self.assertIsNone(payloads.decode_head(head[:cut]))
        self.assertEqual(payloads.decode_head(head + b"rest"), ({"ok": True, "result": {"n": 1}}, len(head)))
        with self.assertRaises(ValueError):
            payloads.decode_head(b"\x7f\xff\xff\xff")
