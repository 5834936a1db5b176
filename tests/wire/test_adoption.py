# -*- test-case-name: tests.wire.test_adoption -*-
"""
Tests for :mod:`vmservice.wire.adoption`: the ``adopt`` request's header and
body, round trips with hypothesis and the refusals of each field.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.wire.adoption import (
    MAX_ENTROPY,
    MIN_ENTROPY,
    AdoptionError,
    AdoptionRequest,
    decode_adoption,
    encode_adoption,
)

_label = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?\Z")
hostnames = st.lists(_label, min_size=1, max_size=3).map(".".join).filter(lambda name: len(name) <= 64)
machine_ids = st.binary(min_size=16, max_size=16).map(bytes.hex).filter(lambda h: h != "0" * 32)
octet = st.integers(min_value=0, max_value=255)
ipv4 = st.tuples(octet, octet, octet, octet).map(lambda parts: ".".join(map(str, parts)))
macs = st.binary(min_size=6, max_size=6).map(lambda raw: ":".join(f"{b:02x}" for b in bytes([raw[0] & 0xFE]) + raw[1:]))
nets = st.none() | st.tuples(macs, ipv4, st.integers(min_value=0, max_value=32), st.none() | ipv4)
requests = st.builds(
    lambda hostname, machine_id, clock, entropy, net: AdoptionRequest(
        hostname, machine_id, clock, entropy,
        *((net[0], f"{net[1]}/{net[2]}", net[3]) if net is not None else (None, None, None)),
    ),
    hostnames, machine_ids, st.integers(min_value=1, max_value=2**63 - 1),
    st.binary(min_size=MIN_ENTROPY, max_size=MAX_ENTROPY), nets,
)

GOOD = AdoptionRequest("node-7", "0123456789abcdef0123456789abcdef", 1_700_000_000_000_000_000, b"e" * 64,
                       "52:54:00:0a:00:05", "10.0.0.5/24", "10.0.0.1")


class CodecTests(SynchronousTestCase):
    """encode_adoption and decode_adoption."""

    @given(requests)
    def test_round_trip(self, request: AdoptionRequest) -> None:
        """A request comes out as it went in, through a JSON header."""
        header, body = encode_adoption(request)
        header = json.loads(json.dumps(header))
        self.assertEqual(decode_adoption(header, body), request)
        self.assertEqual(header["entropy_size"], len(body))
        self.assertNotIn("entropy", header)

    def test_layout(self) -> None:
        """The header names the op and holds everything but the entropy, which is the body."""
        header, body = encode_adoption(GOOD)
        self.assertEqual(header, {
            "op": "adopt", "hostname": "node-7", "machine_id": "0123456789abcdef0123456789abcdef",
            "wall_clock_ns": 1_700_000_000_000_000_000, "entropy_size": 64,
            "net": {"mac": "52:54:00:0a:00:05", "address": "10.0.0.5/24", "gateway": "10.0.0.1"},
        })
        self.assertEqual(body, b"e" * 64)
        header, _ = encode_adoption(AdoptionRequest("n", "1" * 32, 5, b"x" * 32))
        self.assertIsNone(header["net"])

    def test_refused_requests(self) -> None:
        """Each invalid field is refused, with the field named."""
        bad: list[tuple[dict[str, Any], str]] = [
            ({"hostname": "-bad"}, "hostname"), ({"hostname": "a" * 65}, "hostname"), ({"hostname": ""}, "hostname"),
            ({"hostname": "a b"}, "hostname"), ({"machine_id": "0" * 32}, "machine_id"),
            ({"machine_id": "A" * 32}, "machine_id"), ({"machine_id": "1" * 31}, "machine_id"),
            ({"wall_clock_ns": 0}, "wall_clock_ns"), ({"wall_clock_ns": 2**63}, "wall_clock_ns"),
            ({"wall_clock_ns": True}, "wall_clock_ns"), ({"entropy": b"x" * 31}, "entropy"),
            ({"entropy": b"x" * 513}, "entropy"), ({"mac": "53:54:00:0a:00:05"}, "mac"),
            ({"mac": "52-54-00-0a-00-05"}, "mac"), ({"mac": "52:54:00:0A:00:05"}, "mac"),
            ({"address": "10.0.0.5"}, "address"), ({"address": "10.0.0.256/24"}, "address"),
            ({"address": "10.0.0.5/33"}, "address"), ({"gateway": "10.0.0"}, "gateway"),
            ({"mac": None}, "mac"),
        ]
        for change, field in bad:
            fields = {**GOOD.__dict__, **change}
            with self.assertRaises(AdoptionError, msg=change) as raised:
                encode_adoption(AdoptionRequest(**fields))
            self.assertIn(field, str(raised.exception))

    def test_refused_headers(self) -> None:
        """A header of another op, a body of another size, a net that is no object or has no mac."""
        header, body = encode_adoption(GOOD)
        for change, size in (({"op": "clock"}, 64), ({}, 63), ({"entropy_size": 10}, 10), ({"net": []}, 64),
                             ({"net": {"address": "10.0.0.5/24"}}, 64), ({"hostname": 7}, 64)):
            with self.assertRaises(AdoptionError, msg=change):
                decode_adoption({**header, **change}, body[:size])
